"""Django admin for staff: lists with tenant/status filters, attempts inline, dead-letter replay."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.jobs.models import RunStatus
from apps.tenants.services import api_key_create

from .conftest import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff():
    user = get_user_model().objects.create_superuser("staff", "staff@chime.test", "pw-Chime-2026!")
    client = Client()
    client.force_login(user)
    return client


def test_lists_filter_by_tenant_and_status(staff, tenant, job, failed_run, other_failed_run):
    html = staff.get(f"/admin/jobs/jobrun/?status__exact=failed&tenant__id__exact={tenant.id}").content.decode()
    assert str(failed_run.id) in html and str(other_failed_run.id) not in html
    assert staff.get("/admin/jobs/jobdefinition/?status__exact=active").status_code == 200
    assert staff.get("/admin/tenants/tenant/").status_code == 200
    assert staff.get("/admin/tenants/membership/").status_code == 200


def test_a_run_page_shows_its_attempts_and_a_replay_button_when_failed(staff, job, failed_run):
    html = staff.get(f"/admin/jobs/jobrun/{failed_run.id}/change/").content.decode()
    assert "boom" in html and "HTTP 500" in html
    assert f"/admin/jobs/jobrun/{failed_run.id}/replay/" in html
    succeeded = make_run(job)
    assert "/replay/" not in staff.get(f"/admin/jobs/jobrun/{succeeded.id}/change/").content.decode()


def test_the_replay_button(staff, failed_run):
    assert staff.get(f"/admin/jobs/jobrun/{failed_run.id}/replay/").status_code == 405
    response = staff.post(f"/admin/jobs/jobrun/{failed_run.id}/replay/")
    assert response.status_code == 302
    failed_run.refresh_from_db()
    assert failed_run.status == RunStatus.SCHEDULED
    response = staff.post(f"/admin/jobs/jobrun/{failed_run.id}/replay/", follow=True)
    assert "Only failed runs can be replayed" in response.content.decode()


def test_the_replay_action_replays_only_dead_letters(staff, job, failed_run, other_failed_run):
    succeeded = make_run(job)
    response = staff.post(
        "/admin/jobs/jobrun/",
        {"action": "replay_dead_letters", "_selected_action": [failed_run.id, other_failed_run.id, succeeded.id]},
        follow=True,
    )
    assert "Replayed 2 run(s)" in response.content.decode()
    for run in (failed_run, other_failed_run):
        run.refresh_from_db()
        assert run.status == RunStatus.SCHEDULED
    succeeded.refresh_from_db()
    assert succeeded.status == RunStatus.SUCCEEDED


def test_api_keys_show_no_secret_and_cannot_be_added_here(staff, tenant):
    key = api_key_create(tenant=tenant, name="ci").api_key
    html = staff.get(f"/admin/tenants/apikey/{key.id}/change/").content.decode()
    assert key.prefix in html and key.key_hash not in html
    assert staff.get("/admin/tenants/apikey/add/").status_code == 403


def test_runs_cannot_be_edited_in_the_admin(staff, failed_run):
    staff.post(f"/admin/jobs/jobrun/{failed_run.id}/change/", {"status": "succeeded"})
    failed_run.refresh_from_db()
    assert failed_run.status == RunStatus.FAILED


def test_non_staff_users_cannot_use_the_admin(owner_client, failed_run):
    response = owner_client.post(f"/admin/jobs/jobrun/{failed_run.id}/replay/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    failed_run.refresh_from_db()
    assert failed_run.status == RunStatus.FAILED


def test_staff_list_operations_and_their_celery_task_results(staff, tenant, other_tenant):
    import json

    from django_celery_results.models import TaskResult

    from apps.operations.services import operation_start

    mine = operation_start(tenant=tenant, kind="replay", params={}, created_by="user:owner")
    operation_start(tenant=other_tenant, kind="backfill", params={})
    TaskResult.objects.create(task_id=mine.task_id, status="SUCCESS", result=json.dumps({"replayed": 0}))
    html = staff.get("/admin/operations/operation/").content.decode()
    assert str(mine.id) in html and "backfill" in html
    assert str(mine.id) in staff.get(f"/admin/operations/operation/?q={mine.task_id}").content.decode()
    assert staff.get(f"/admin/operations/operation/{mine.id}/change/").status_code == 200
    assert mine.task_id in staff.get("/admin/django_celery_results/taskresult/").content.decode()


def test_a_job_page_shows_its_header_values_redacted_and_offers_no_field_for_them(staff, tenant):
    from apps.jobs.models import JobDefinition
    from tests.factories import JobFactory

    job = JobFactory(tenant=tenant, target_headers={"Authorization": "Bearer sup3r-s3cret", "X-Plain": "visible"})
    html = staff.get(f"/admin/jobs/jobdefinition/{job.id}/change/").content.decode()
    assert "sup3r-s3cret" not in html
    assert "Authorization" in html and "visible" in html
    assert 'name="target_headers"' not in html
    assert JobDefinition.objects.get(id=job.id).target_headers["Authorization"] == "Bearer sup3r-s3cret"
