"""Retention: what leaves the hot store (archived first), and what never does."""

from datetime import timedelta

from django.utils import timezone

from apps.history import archive, services
from apps.history.models import ArchiveKind, RunArchive
from apps.jobs.models import JobRun, RunAttempt, RunStatus
from apps.tenants.models import TenantLimits


def test_old_terminal_runs_are_archived_then_pruned_young_ones_and_dead_letters_stay(tenant, make_runs):
    old = make_runs(days_old=40, n=3, attempts=2)
    old += make_runs(days_old=35, status=RunStatus.CANCELLED) + make_runs(
        days_old=33, status=RunStatus.SKIPPED, attempts=0
    )
    young = make_runs(days_old=5, n=2)
    dead = make_runs(days_old=40, status=RunStatus.FAILED, attempts=3)
    stuck = make_runs(days_old=40, status=RunStatus.RETRYING) + make_runs(days_old=40, status=RunStatus.QUEUED)

    result = services.prune_tenant(tenant=tenant, now=timezone.now())

    assert (result.runs, result.attempts, result.dead_letters) == (5, 7, 0)
    kept = set(JobRun.objects.values_list("id", flat=True))
    assert kept == {r.id for r in young + dead + stuck}
    assert not RunAttempt.objects.filter(run_id__in=[r.id for r in old]).exists()
    archived = []
    for record in RunArchive.objects.filter(tenant=tenant, kind=ArchiveKind.PRUNE):
        with archive.archive_storage().open(record.path, "rb") as stream:
            archived += archive.decode(stream.read())
    assert sorted(r["id"] for r in archived) == sorted(str(r.id) for r in old)
    assert sum(len(r["attempts"]) for r in archived) == 7


def test_dead_letters_go_after_their_own_retention(tenant, make_runs, settings):
    settings.CHIME_DEAD_LETTER_RETENTION_DAYS = 60
    kept = make_runs(days_old=50, status=RunStatus.FAILED)
    gone = make_runs(days_old=70, status=RunStatus.FAILED)

    result = services.prune_tenant(tenant=tenant, now=timezone.now())

    assert (result.runs, result.dead_letters) == (1, 1)
    assert set(JobRun.objects.values_list("id", flat=True)) == {kept[0].id}
    assert gone[0].id not in set(JobRun.objects.values_list("id", flat=True))


def test_a_longer_override_keeps_another_tenants_runs(tenant, other_tenant, make_runs, make_other_runs):
    TenantLimits.objects.create(tenant=other_tenant, run_retention_days=60)
    mine = make_runs(days_old=40)
    theirs = make_other_runs(days_old=40)

    result = services.prune_all(now=timezone.now())

    assert result["runs"] == 1
    assert set(JobRun.objects.values_list("id", flat=True)) == {theirs[0].id}
    assert not RunArchive.objects.filter(tenant=other_tenant).exists()
    assert RunArchive.objects.get(tenant=tenant).run_count == 1
    assert mine[0].id not in set(JobRun.objects.values_list("id", flat=True))


def test_a_run_finished_recently_stays_though_created_long_ago(tenant, make_runs):
    """A dead letter replayed after weeks ends as succeeded: it gets a full retention from then."""
    run = make_runs(days_old=40)[0]
    JobRun.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(days=1))

    assert services.prune_tenant(tenant=tenant, now=timezone.now()).runs == 0


def test_dry_run_counts_and_deletes_nothing(tenant, make_runs):
    make_runs(days_old=40, n=2, attempts=2)

    result = services.prune_tenant(tenant=tenant, now=timezone.now(), dry_run=True)

    assert (result.runs, result.attempts, result.dry_run) == (2, 4, True)
    assert JobRun.objects.count() == 2 and not RunArchive.objects.exists()


def test_a_second_pass_appends_a_part_and_loses_nothing(tenant, make_runs):
    first = make_runs(days_old=40)
    services.prune_tenant(tenant=tenant, now=timezone.now())
    second = make_runs(days_old=40)  # the same UTC day (or the next one, near midnight)

    services.prune_tenant(tenant=tenant, now=timezone.now())

    records = RunArchive.objects.filter(tenant=tenant).order_by("day", "part")
    assert len({r.path for r in records}) == 2
    ids = []
    for record in records:
        with archive.archive_storage().open(record.path, "rb") as stream:
            ids += [r["id"] for r in archive.decode(stream.read())]
    assert sorted(ids) == sorted(str(r.id) for r in first + second)


def test_export_writes_a_range_and_deletes_nothing(tenant, make_runs):
    runs = make_runs(days_old=3, n=2) + make_runs(days_old=2, status=RunStatus.RUNNING)
    make_runs(days_old=10)
    now = timezone.now()
    progress = []

    records = services.export_runs(
        tenant=tenant, start=now - timedelta(days=4), end=now, progress=lambda d, t: progress.append((d, t))
    )

    assert sum(r.run_count for r in records) == 3 and all(r.kind == ArchiveKind.EXPORT for r in records)
    assert progress[0] == (0, 3) and progress[-1] == (3, 3)
    assert JobRun.objects.count() == 4
    exported = []
    for record in records:
        with archive.archive_storage().open(record.path, "rb") as stream:
            exported += [r["id"] for r in archive.decode(stream.read())]
    assert sorted(exported) == sorted(str(r.id) for r in runs)
