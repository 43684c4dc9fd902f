"""Writing and reading archive files: gzip-compressed JSON lines, one run (with its attempts) a line.

The files live in the `chime_archive` storage (settings.STORAGES): a directory by default, any
S3-compatible bucket through django-storages by settings (README.md#configuration). A file is
verified after it is written (read back, same SHA-256 and size) before anything is deleted.
"""

import contextlib
import gzip
import hashlib
import io
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime

from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import connection
from django.db.models.expressions import RawSQL

from apps.delivery.outcomes import ATTEMPT_COLUMNS
from apps.jobs.attempt_headers import sent_headers
from apps.jobs.models import RunAttempt
from apps.jobs.secrets import redact_headers

STORAGE_ALIAS = "chime_archive"
FORMAT_VERSION = 1

RUN_FIELDS = [
    "id",
    "definition_id",
    "partition",
    "priority",
    "scheduled_for",
    "trigger",
    "status",
    "status_reason",
    "available_at",
    "attempt_count",
    "attempts_before_replay",
    "coalesced_count",
    "coalesced_first_at",
    "coalesced_last_at",
    "created_at",
    "queued_at",
    "started_at",
    "finished_at",
]
# The attempt's stored columns (one list, apps/delivery/outcomes.py), less the run it sits under.
ATTEMPT_FIELDS = [column for column in ATTEMPT_COLUMNS if column != "run_id"]


class ArchiveWriteError(Exception):
    """The file could not be written or did not read back identical: nothing may be deleted."""


@dataclass(frozen=True)
class WrittenFile:
    path: str
    run_count: int
    attempt_count: int
    bytes: int
    sha256: str


def archive_storage():
    return storages[STORAGE_ALIAS]


def _json_default(value):
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)  # UUIDs


def id_set(ids: list):
    """The right-hand side of an `__in` lookup for a batch of ids: on PostgreSQL one array
    parameter (`IN (SELECT unnest(%s::uuid[]))`) instead of 5,000 placeholders, which cost the
    client more to build and send than the statement costs the server (bench/prune_service.py
    under cProfile: a quarter of a pass)."""
    if connection.vendor == "postgresql":
        return RawSQL("SELECT unnest(%s::uuid[])", (list(ids),))
    return list(ids)


def run_records(runs: list[dict]) -> list[dict]:
    """`runs`: dicts of RUN_FIELDS (a .values() query). Adds each run's attempts, by number."""
    attempts = defaultdict(list)
    by_id = {run["id"]: run for run in runs}
    rows = RunAttempt.objects.filter(run_id__in=id_set(by_id)).order_by("run_id", "number")
    for attempt in rows.values("run_id", *ATTEMPT_FIELDS):
        run_id = attempt.pop("run_id")
        run = by_id[run_id]
        # As sent (apps/jobs/attempt_headers.py), redacted again by name in case.
        sent = sent_headers(
            attempt["request_headers"],
            run_id=run_id,
            job_id=run["definition_id"],
            attempt=attempt["number"],
            scheduled_for=run["scheduled_for"],
        )
        attempt["request_headers"] = redact_headers(sent)
        attempts[run_id].append(attempt)
    return [{"format": FORMAT_VERSION, **run, "attempts": attempts[run["id"]]} for run in runs]


def encode(records: list[dict]) -> bytes:
    buffer = io.BytesIO()
    # mtime=0: the same runs give the same bytes (a re-written part is recognisably the same).
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as stream:
        for record in records:
            stream.write(json.dumps(record, default=_json_default, separators=(",", ":")).encode())
            stream.write(b"\n")
    return buffer.getvalue()


def decode(data: bytes) -> list[dict]:
    """The records of an archive file (what a client does after downloading one)."""
    return [json.loads(line) for line in gzip.decompress(data).splitlines() if line]


def write_file(name: str, records: list[dict]) -> WrittenFile:
    """Save the records under `name` (the storage may pick another free name: the returned path
    is the one to record), read it back, and check it. Raises ArchiveWriteError otherwise."""
    data = encode(records)
    digest = hashlib.sha256(data).hexdigest()
    storage = archive_storage()
    try:
        path = storage.save(name, ContentFile(data))
        with storage.open(path, "rb") as stream:
            stored = stream.read()
    except Exception as error:  # any storage failure (disk, network, credentials) stops the prune
        raise ArchiveWriteError(f"could not write archive {name}: {error}") from error
    if hashlib.sha256(stored).hexdigest() != digest:
        raise ArchiveWriteError(f"archive {path} did not read back identical ({len(stored)} of {len(data)} bytes)")
    attempts = sum(len(r["attempts"]) for r in records)
    return WrittenFile(path=path, run_count=len(records), attempt_count=attempts, bytes=len(data), sha256=digest)


def delete_file(path: str) -> None:
    """Remove a file whose runs were not deleted after all (its index row was never written)."""
    with contextlib.suppress(Exception):  # an orphan file is harmless: no index row points at it
        archive_storage().delete(path)


def file_name(*, tenant, kind: str, day: date, part: int) -> str:
    return f"{kind}/{tenant.pk}/{day:%Y/%m/%d}/runs-{day:%Y%m%d}-part{part:05d}.jsonl.gz"


def run_values(queryset) -> list[dict]:
    return list(queryset.values(*RUN_FIELDS))
