"""Pruning in bounded batches: each transaction deletes at most CHIME_PRUNE_BATCH_SIZE runs (with
their attempts) and records their archive; a pass that fails midway deletes nothing it did not
archive, and running it again finishes the job."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from apps.history import archive, services
from apps.history.models import RunArchive
from apps.jobs.models import JobRun, RunAttempt, RunStatus

ROOT = Path(__file__).resolve().parents[2]


class StatementLog:
    """Every statement the connection runs inside a transaction, with its row count, and a
    marker at each commit (statements in autocommit are their own transaction: left out)."""

    def __init__(self):
        self.entries: list[tuple[str, int]] = []

    def __call__(self, execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if connection.in_atomic_block:
            self.entries.append((sql, context["cursor"].rowcount))
        return result

    def transactions(self) -> list[list[tuple[str, int]]]:
        groups, current = [], []
        for sql, rows in self.entries:
            if sql == "COMMIT":
                groups.append(current)
                current = []
            else:
                current.append((sql, rows))
        return groups


@pytest.mark.django_db(transaction=True)
def test_each_transaction_deletes_one_bounded_batch_with_its_attempts(tenant, make_runs, settings, monkeypatch):
    settings.CHIME_PRUNE_BATCH_SIZE = 4
    make_runs(days_old=40, n=10, attempts=2)
    young = make_runs(days_old=1, n=2)
    log = StatementLog()
    original_commit = connection.commit
    monkeypatch.setattr(connection, "commit", lambda: (log.entries.append(("COMMIT", 0)), original_commit())[1])
    progress = []

    with connection.execute_wrapper(log):
        result = services.prune_tenant(tenant=tenant, now=timezone.now(), progress=lambda d, t: progress.append((d, t)))

    assert (result.runs, result.attempts, result.batches) == (10, 20, 3)
    deleting = [t for t in log.transactions() if any(sql.startswith('DELETE FROM "jobs_jobrun"') for sql, _ in t)]
    assert len(deleting) == 3  # one transaction per batch, never one for the whole pass
    for statements in deleting:
        runs = [rows for sql, rows in statements if sql.startswith('DELETE FROM "jobs_jobrun"')]
        attempts = [rows for sql, rows in statements if sql.startswith('DELETE FROM "jobs_runattempt"')]
        archives = [sql for sql, _ in statements if sql.startswith('INSERT INTO "history_runarchive"')]
        assert len(runs) == len(attempts) == len(archives) == 1
        assert runs[0] <= 4 and attempts[0] == 2 * runs[0]
        assert len(statements) <= 6  # lock + check, attempts count, archive row, two deletes: nothing per row
    assert [p[0] for p in progress] == [0, 4, 8, 10, 10] and {p[1] for p in progress} == {10}
    assert set(JobRun.objects.values_list("id", flat=True)) == {r.id for r in young}
    assert sorted(RunArchive.objects.values_list("part", flat=True)) == [1, 2, 3]


def test_a_storage_failure_midway_deletes_only_what_was_archived_and_a_rerun_finishes(
    tenant, make_runs, settings, tmp_path
):
    settings.CHIME_PRUNE_BATCH_SIZE = 3
    runs = make_runs(days_old=40, n=7, attempts=1)
    not_a_directory = tmp_path / "blocked"
    not_a_directory.write_text("a file where the archive directory should be")
    working = settings.STORAGES

    def break_storage_after_first_batch(done, total):
        if done == 3:
            broken = {**working["chime_archive"], "OPTIONS": {"location": str(not_a_directory / "x")}}
            settings.STORAGES = {**working, "chime_archive": broken}

    with pytest.raises(archive.ArchiveWriteError):
        services.prune_tenant(tenant=tenant, now=timezone.now(), progress=break_storage_after_first_batch)

    assert JobRun.objects.count() == 4 and RunAttempt.objects.count() == 4
    (first,) = RunArchive.objects.all()
    with open(Path(working["chime_archive"]["OPTIONS"]["location"]) / first.path, "rb") as stream:
        assert {line["id"] for line in archive.decode(stream.read())} == {str(r.id) for r in runs[:3]}

    settings.STORAGES = working
    again = services.prune_tenant(tenant=tenant, now=timezone.now())

    assert again.runs == 4 and not JobRun.objects.exists()
    assert sorted(RunArchive.objects.values_list("part", flat=True)) == [1, 2, 3]
    assert sum(RunArchive.objects.values_list("run_count", flat=True)) == 7


def test_a_dead_letter_replayed_while_its_batch_is_written_stays_and_is_not_archived(tenant, make_runs, settings):
    settings.CHIME_DEAD_LETTER_RETENTION_DAYS = 10
    dead = make_runs(days_old=40, status=RunStatus.FAILED, n=3)
    replayed = dead[1]
    settings.STORAGES = {
        **settings.STORAGES,
        "chime_archive": {
            "BACKEND": "tests.history.storage.ReplayDuringSave",
            "OPTIONS": {"location": settings.STORAGES["chime_archive"]["OPTIONS"]["location"], "run_id": replayed.id},
        },
    }

    result = services.prune_tenant(tenant=tenant, now=timezone.now())

    assert result.runs == 2
    assert list(JobRun.objects.values_list("id", "status")) == [(replayed.id, RunStatus.SCHEDULED)]
    (record,) = RunArchive.objects.all()
    with archive.archive_storage().open(record.path, "rb") as stream:
        assert {line["id"] for line in archive.decode(stream.read())} == {str(dead[0].id), str(dead[2].id)}
    assert len(list(Path(settings.STORAGES["chime_archive"]["OPTIONS"]["location"]).rglob("*.gz"))) == 1


def test_the_command_prunes_with_clear_output(tenant, make_runs, capsys):
    make_runs(days_old=40, n=2)
    call_command("prune_history", "--dry-run")
    assert "acme: would archive and delete 2 runs" in capsys.readouterr().out
    assert JobRun.objects.count() == 2
    call_command("prune_history", "--tenant", "acme")
    out = capsys.readouterr().out
    assert "acme: archived and deleted 2 runs (2 attempts, 0 dead letters) in 1 archive files" in out
    assert not JobRun.objects.exists()


def test_the_command_refuses_an_unknown_tenant(db):
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        call_command("prune_history", "--tenant", "nope")


@pytest.mark.parametrize("arguments", [["--tenant", "nope"], ["--bogus"], ["--tenant"]])
def test_bad_command_input_exits_non_zero(db, arguments):
    database = django_settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "prune_history", *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, done.stdout
    assert ("No tenant 'nope'" if arguments[-1] == "nope" else "usage:") in done.stderr
