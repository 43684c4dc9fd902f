"""The job form refuses NUL (U+0000) with a form error, as the API does with a 400 (issue #10)."""

import pytest

from apps.jobs.models import JobDefinition

from .test_job_form import FORM

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "n\x00"}, "name"),
        ({"cron_expression": "0 9 * * *\x00"}, "cron_expression"),
        ({"target_headers": "X-A: 1\x00"}, "target_headers"),
        ({"target_body": '{"a": "\\u0000"}'}, "target_body"),
        ({"target_body": '{"\\u0000": 1}'}, "target_body"),
    ],
)
def test_nul_in_the_job_form_is_a_form_error(owner_client, changes, field):
    response = owner_client.post("/jobs/new/", {**FORM, **changes})
    assert response.status_code == 200  # the form again, with its errors
    errors = response.context["form"].errors
    assert field in errors and "null" in " ".join(errors[field]).lower(), errors
    assert not JobDefinition.objects.exists()


def test_a_search_with_nul_in_the_job_list_is_not_an_error(owner_client, job):
    response = owner_client.get("/jobs/?q=%00")
    assert response.status_code == 200
