"""Header secrecy in the dashboard (issue #10, deliverable 6): viewers see header names, never
values; owners and admins see values with secret ones redacted; the edit form keeps a stored
secret when its placeholder comes back."""

import pytest

from apps.jobs.models import JobDefinition, RunAttempt
from apps.jobs.secrets import REDACTED
from apps.jobs.services import job_create

from .conftest import JOB_FIELDS, make_run
from .test_jobs import HTMX, VALID

pytestmark = pytest.mark.django_db

HEADERS = {"Authorization": "Bearer s3cr3t-abcd", "X-Custom": "hush-hush", "X-Team": "billing"}


@pytest.fixture
def secret_job(tenant):
    fields = {"target_headers": HEADERS, "secret_header_names": ["X-Custom"], **JOB_FIELDS}
    return job_create(tenant=tenant, name="sync", **fields)


def test_a_viewer_sees_header_names_but_no_values(viewer_client, secret_job):
    html = viewer_client.get(f"/jobs/{secret_job.id}/").content.decode()
    assert "Authorization" in html and "X-Team" in html
    assert not any(value in html for value in HEADERS.values())


def test_an_owner_sees_plain_values_and_secret_ones_redacted(owner_client, secret_job):
    html = owner_client.get(f"/jobs/{secret_job.id}/").content.decode()
    assert "X-Team: billing" in html
    assert "s3cr3t" not in html and "hush-hush" not in html
    assert "Authorization: &lt;redacted&gt;" in html and "X-Custom: &lt;redacted&gt;" in html


def test_a_viewer_sees_no_header_values_of_attempts(viewer_client, owner_client, secret_job):
    run = make_run(secret_job)
    RunAttempt.objects.filter(run=run).update(request_headers={"X-Team": "billing", "Authorization": REDACTED})
    html = viewer_client.get(f"/runs/{run.id}/attempts/", **HTMX).content.decode()
    assert "X-Team: hidden" in html and "billing" not in html
    assert "X-Team: billing" in owner_client.get(f"/runs/{run.id}/attempts/", **HTMX).content.decode()


def test_the_edit_form_shows_placeholders_and_saving_it_keeps_the_secrets(owner_client, secret_job):
    form = owner_client.get(f"/jobs/{secret_job.id}/edit/").context["form"]
    lines = set(form.initial["target_headers"].splitlines())
    assert lines == {f"Authorization: {REDACTED}", f"X-Custom: {REDACTED}", "X-Team: billing"}
    assert form.initial["secret_header_names"] == "X-Custom"
    data = {**VALID, "target_url": JOB_FIELDS["target_url"], "target_headers": form.initial["target_headers"]}
    response = owner_client.post(f"/jobs/{secret_job.id}/edit/", {**data, "secret_header_names": "x-custom"})
    assert response.status_code == 302, response.context["form"].errors
    job = JobDefinition.objects.get(id=secret_job.id)
    assert (job.target_headers, job.secret_header_names) == (HEADERS, ["X-Custom"])


def test_the_form_refuses_a_placeholder_with_nothing_stored(owner_client):
    response = owner_client.post("/jobs/new/", {**VALID, "target_headers": f"Authorization: {REDACTED}"})
    assert "no stored value" in " ".join(response.context["form"].errors["target_headers"])
    assert not JobDefinition.objects.exists()


def test_the_form_refuses_a_secret_name_that_is_not_a_header(owner_client):
    response = owner_client.post("/jobs/new/", {**VALID, "secret_header_names": "X-Missing"})
    assert "X-Missing" in " ".join(response.context["form"].errors["secret_header_names"])


def test_an_attempt_shows_the_headers_derived_from_its_run(owner_client, secret_job):
    """The attempt stores its headers less those derived from the run (apps/jobs/attempt_headers.py);
    the dashboard shows them as sent."""
    run = make_run(secret_job)
    RunAttempt.objects.filter(run=run).update(request_headers={"X-Team": "billing", "webhook-timestamp": "1"})
    html = owner_client.get(f"/runs/{run.id}/attempts/", **HTMX).content.decode()
    assert f"Chime-Run-Id: {run.id}" in html and f"webhook-id: {run.id}" in html
    assert "X-Team: billing" in html and "8 headers" in html
