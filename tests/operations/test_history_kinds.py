"""The export and prune operations: apps/history's passes run as tracked operations, their
progress reported into the operation, run again safely after a lost worker."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.history import services as history
from apps.history.models import ArchiveKind, RunArchive
from apps.jobs.models import JobRun
from apps.operations import services
from apps.operations.models import Operation
from tests.history.conftest import RunMaker

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def archive_dir(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "chime_archive": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "archive")},
        },
    }


def test_a_prune_operation_archives_then_deletes_what_retention_lets_go(tenant, other_tenant, settings):
    settings.CHIME_PRUNE_BATCH_SIZE = 2
    make = RunMaker(tenant)
    old, young = make(days_old=40, n=5), make(days_old=3, n=2)
    theirs = RunMaker(other_tenant)(days_old=40, n=2)
    operation = services.operation_start(tenant=tenant, kind="prune", params={})
    counts = services.operation_run(operation.pk, owner="test", pause=0)
    assert counts == {"runs": 5, "attempts": 5, "dead_letters": 0, "archives": 3, "bytes": counts["bytes"]}
    operation.refresh_from_db()
    assert (operation.done, operation.total) == (5, 5) and operation.finished_at is not None
    left = set(JobRun.objects.values_list("id", flat=True))
    assert left == {r.id for r in young + theirs} and not left & {r.id for r in old}


def test_a_prune_run_again_after_its_worker_died_finishes_what_is_left(tenant, settings):
    settings.CHIME_PRUNE_BATCH_SIZE = 2
    make = RunMaker(tenant)
    make(days_old=40, n=5)
    young = make(days_old=3)
    operation = services.operation_start(tenant=tenant, kind="prune", params={})
    # The dead worker's pass committed its batches (here all of them: 3 + 2 runs) and died before
    # it could finish the operation.
    settings.CHIME_PRUNE_BATCH_SIZE = 3
    first = history.prune_tenant(tenant=tenant, now=operation.created_at)
    assert first.runs == 5
    Operation.objects.filter(pk=operation.pk).update(
        lease_owner="dead", lease_expires_at=timezone.now() - timedelta(seconds=1), done=3, total=5
    )
    counts = services.operation_run(operation.pk, owner="next", pause=0)
    assert counts["runs"] == 0  # nothing left to do, nothing done twice
    assert set(JobRun.objects.values_list("id", flat=True)) == {young[0].id}
    assert RunArchive.objects.filter(tenant=tenant, kind=ArchiveKind.PRUNE).count() == 2


def test_an_export_operation_archives_a_range_and_deletes_nothing(tenant, other_tenant):
    make = RunMaker(tenant)
    inside = make(days_old=10, n=3)
    make(days_old=20)
    RunMaker(other_tenant)(days_old=10, n=2)
    now = timezone.now()
    params = {"start": (now - timedelta(days=11)).isoformat(), "end": (now - timedelta(days=9)).isoformat()}
    operation = services.operation_start(tenant=tenant, kind="export", params=params)
    counts = services.operation_run(operation.pk, owner="test", pause=0)
    assert counts["runs"] == 3 and counts["archives"] >= 1
    operation.refresh_from_db()
    assert (operation.done, operation.total) == (3, 3)
    assert JobRun.objects.count() == 3 + 1 + 2
    exported = RunArchive.objects.filter(kind=ArchiveKind.EXPORT)
    assert {a.tenant_id for a in exported} == {tenant.id} and sum(a.run_count for a in exported) == len(inside)


def test_export_and_prune_over_the_api(api):
    now = timezone.now()
    bad = api.post("/api/v1/operations/export", {"start": now.isoformat(), "end": now.isoformat()}, format="json")
    assert bad.status_code == 400 and "end" in bad.json()["error"]["fields"]
    missing = api.post("/api/v1/operations/export", {}, format="json")
    assert missing.status_code == 400 and {"start", "end"} <= set(missing.json()["error"]["fields"])
    start = (now - timedelta(days=2)).isoformat()
    ok = api.post("/api/v1/operations/export", {"start": start, "end": now.isoformat()}, format="json")
    assert ok.status_code == 202 and ok.json()["kind"] == "export"
    assert api.post("/api/v1/operations/prune", {"days": 3}, format="json").status_code == 400
    prune = api.post("/api/v1/operations/prune", {}, format="json")
    assert prune.status_code == 202 and prune.json()["kind"] == "prune" and prune.json()["params"] == {}
