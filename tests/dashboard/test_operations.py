"""The operations pages and "Replay all matching" on the dead-letters page (no worker: the
operation is started, its task's message is not sent inside the test's transaction)."""

import json

import pytest
from django_celery_results.models import TaskResult

from apps.jobs.models import RunStatus
from apps.operations import services
from apps.operations.models import Operation

from .conftest import make_run

pytestmark = pytest.mark.django_db


def test_the_dead_letters_filter_lists_the_matching_runs_only(owner_client, job, failed_run):
    not_found = make_run(job, status=RunStatus.FAILED, minutes_ago=9, status_code=404, error="HTTP 404")
    page = owner_client.get("/dead-letters/", {"status_code": "404"}).content.decode()
    assert f"run-{not_found.id}" in page and f"run-{failed_run.id}" not in page
    page = owner_client.get("/dead-letters/", {"status_code": "42"}).content.decode()
    assert "field-error" in page  # a bad filter is a message on its field, not a 500


def test_replay_all_matching_starts_an_operation_with_the_pages_filter(owner_client, owner, job, failed_run):
    response = owner_client.post("/dead-letters/replay-all/", {"job": str(job.id), "status_code": "500"})
    operation = Operation.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/operations/{operation.id}/"
    assert operation.kind == "replay" and operation.params == {"job": str(job.id), "status_code": 500}
    assert operation.created_by == f"user:{owner.username}"
    hx = owner_client.post("/dead-letters/replay-all/", {"status_code": "500"}, HTTP_HX_REQUEST="true")
    assert hx.status_code == 204 and hx["HX-Redirect"].startswith("/operations/")


def test_replay_all_refuses_an_empty_match_and_a_viewer(owner_client, viewer_client, failed_run):
    response = owner_client.post("/dead-letters/replay-all/", {"status_code": "418"})
    assert response.status_code == 302 and response["Location"] == "/dead-letters/"
    assert viewer_client.post("/dead-letters/replay-all/", {}).status_code == 403
    assert Operation.objects.count() == 0


def test_the_detail_polls_while_running_and_stops_once_done(owner_client, tenant, failed_run):
    operation = services.operation_start(tenant=tenant, kind="replay", params={})
    page = owner_client.get(f"/operations/{operation.id}/").content.decode()
    assert 'hx-trigger="every 1s"' in page and 'value="0"' in page and "pending" in page
    services.operation_run(operation.pk, owner="test", pause=0)
    TaskResult.objects.create(task_id=operation.task_id, status="SUCCESS", result=json.dumps({"replayed": 1}))
    fragment = owner_client.get(
        f"/operations/{operation.id}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="operation-progress"
    ).content.decode()
    assert fragment.lstrip().startswith('<section id="operation-progress"') and "hx-trigger" not in fragment
    assert 'value="100"' in fragment and "100 %" in fragment and "succeeded" in fragment


def test_operations_pages_are_tenant_scoped(owner_client, tenant, other_tenant):
    mine = services.operation_start(tenant=tenant, kind="replay", params={})
    theirs = services.operation_start(tenant=other_tenant, kind="replay", params={})
    listing = owner_client.get("/operations/").content.decode()
    assert f"/operations/{mine.id}/" in listing and str(theirs.id) not in listing
    assert owner_client.get(f"/operations/{theirs.id}/").status_code == 404
