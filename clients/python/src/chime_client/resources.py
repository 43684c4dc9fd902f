"""Every API operation, once for both clients.

Each method builds a :class:`~chime_client._http.Call` and hands it to the client's ``_run``
(one answer) or ``_paginate`` (a list followed through its ``next`` links). On :class:`Client`
they return the value; on :class:`AsyncClient` an awaitable (``_run``) or an async iterator
(``_paginate``). ``OPERATIONS`` maps the schema's operationIds to these methods; a test checks
that every operation the server serves is here.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ._http import Call, clean_params, when

if TYPE_CHECKING:
    from .models import (
        ApiKeyCreated,
        BackfillResult,
        DstPolicyRequest,
        Job,
        JobBatch,
        JobDetail,
        Operation,
        Replayed,
        Run,
        RunDetail,
        SchedulePreview,
        ScheduleRequest,
        SigningSecret,
        Stats,
        TargetRequest,
    )

Time = datetime | str


class _Resource:
    def __init__(self, client):
        self._client = client

    def _run(self, method: str, path: str, **kwargs):
        return self._client._run(Call(method, path, **kwargs))

    def _paginate(self, path: str, params: dict[str, Any]):
        return self._client._paginate(Call("GET", path, params=clean_params(params)))


class Jobs(_Resource):
    def list(self, *, status: str | None = None, priority: str | None = None, q: str | None = None, limit=None):
        """Every job, newest first, page after page (``limit``: page size, 1-200)."""
        return self._paginate("/jobs", {"status": status, "priority": priority, "q": q, "limit": limit})

    def get(self, job_id: str) -> JobDetail:
        return self._run("GET", f"/jobs/{job_id}")

    def create(
        self,
        *,
        name: str,
        schedule: ScheduleRequest | dict,
        target: TargetRequest | dict,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Job:
        """Create a job (other fields: ``priority``, ``retry``, ``misfire_policy``, ...: docs/api.md).

        An ``Idempotency-Key`` is always sent (a fresh one unless given), so a retry after a lost
        answer returns the first job instead of creating a second one."""
        key = idempotency_key or str(uuid.uuid4())
        body = {"name": name, "schedule": schedule, "target": target, **fields}
        return self._run("POST", "/jobs", json=body, headers={"Idempotency-Key": key})

    def update(self, job_id: str, **fields: Any) -> Job:
        """PATCH: only the fields given change; a nested object (schedule, target, ...) is replaced whole."""
        return self._run("PATCH", f"/jobs/{job_id}", json=fields)

    def delete(self, job_id: str) -> None:
        return self._run("DELETE", f"/jobs/{job_id}")

    def pause(self, job_id: str) -> Job:
        return self._run("POST", f"/jobs/{job_id}/pause")

    def resume(self, job_id: str) -> Job:
        return self._run("POST", f"/jobs/{job_id}/resume")

    def trigger(self, job_id: str) -> Run:
        """A run now (``trigger: "manual"``), even when the job is paused."""
        return self._run("POST", f"/jobs/{job_id}/trigger")

    def backfill(self, job_id: str, *, start: Time, end: Time) -> BackfillResult:
        """A run for every occurrence in ``(start, end]`` (the past only)."""
        return self._run("POST", f"/jobs/{job_id}/backfill", json={"start": when(start), "end": when(end)})

    def runs(self, job_id: str, *, limit=None):
        """Every run of the job, newest first, page after page."""
        return self._paginate(f"/jobs/{job_id}/runs", {"limit": limit})

    def create_many(self, jobs: list[dict], *, idempotency_key: str | None = None) -> JobBatch:
        """Create 1 to 1,000 jobs all or none (each as for ``create``); a 400 names every bad item's
        fields as ``jobs.<index>.<field>``. An ``Idempotency-Key`` is always sent, as for ``create``."""
        key = idempotency_key or str(uuid.uuid4())
        return self._run("POST", "/jobs/batch", json={"jobs": jobs}, headers={"Idempotency-Key": key})


class Runs(_Resource):
    def list(
        self,
        *,
        job: str | None = None,
        status: str | None = None,
        scheduled_after: Time | None = None,
        scheduled_before: Time | None = None,
        limit=None,
    ):
        """Runs, newest first, page after page; every given filter applies."""
        params = {"job": job, "status": status, "limit": limit}
        params.update(scheduled_after=when(scheduled_after), scheduled_before=when(scheduled_before))
        return self._paginate("/runs", params)

    def get(self, run_id: str) -> RunDetail:
        return self._run("GET", f"/runs/{run_id}")

    def cancel(self, run_id: str) -> Run:
        return self._run("POST", f"/runs/{run_id}/cancel")

    def replay(self, run_id: str) -> Run:
        """A failed run again: same run, same webhook-id, a fresh retry budget."""
        return self._run("POST", f"/runs/{run_id}/replay")

    def replay_many(
        self,
        *,
        job: str | None = None,
        status: str | None = None,
        scheduled_after: Time | None = None,
        scheduled_before: Time | None = None,
    ) -> Replayed:
        """Replay every failed run matching the filters; ``{"replayed": n}``."""
        body = {"job": job, "status": status, "scheduled_after": when(scheduled_after)}
        body["scheduled_before"] = when(scheduled_before)
        return self._run("POST", "/runs/replay", json={k: v for k, v in body.items() if v is not None})


class ApiKeys(_Resource):
    def list(self, *, limit=None):
        return self._paginate("/api-keys", {"limit": limit})

    def create(self, name: str = "") -> ApiKeyCreated:
        """A new key; its raw ``key`` is in this answer only."""
        return self._run("POST", "/api-keys", json={"name": name})

    def revoke(self, key_id: str) -> None:
        return self._run("DELETE", f"/api-keys/{key_id}")


class Archives(_Resource):
    def list(self, *, kind: str | None = None, limit=None):
        """Run archive files, newest first (``kind``: prune or export)."""
        return self._paginate("/archives", {"kind": kind, "limit": limit})

    def download(self, archive_id: str) -> bytes:
        """The file's bytes: gzip-compressed JSON lines, one run (with ``attempts``) a line:
        ``[json.loads(line) for line in gzip.decompress(data).splitlines()]``."""
        return self._run("GET", f"/archives/{archive_id}/download")


class SigningSecrets(_Resource):
    def get(self) -> SigningSecret:
        return self._run("GET", "/signing-secret")

    def rotate(self) -> SigningSecret:
        """A new secret; the old one stays valid (both signatures sent) for 24 hours."""
        return self._run("POST", "/signing-secret/rotate")


class Schedules(_Resource):
    def preview(
        self,
        expression: str,
        *,
        timezone: str = "UTC",
        count: int = 10,
        start: Time | None = None,
        dst_policy: DstPolicyRequest | None = None,
    ) -> SchedulePreview:
        """The next ``count`` fire times of a cron expression in a zone, DST effects flagged."""
        body: dict[str, Any] = {"expression": expression, "timezone": timezone, "count": count}
        if start is not None:
            body["start"] = when(start)
        if dst_policy is not None:
            body["dst_policy"] = dst_policy
        return self._run("POST", "/schedules/preview", json=body)


class Operations(_Resource):
    """Bulk operations, run by the server's ops worker: each POST answers at once (202) with the
    operation; ``get`` follows its ``state`` and ``progress``."""

    def list(self, *, limit=None):
        return self._paginate("/operations", {"limit": limit})

    def get(self, operation_id: str) -> Operation:
        return self._run("GET", f"/operations/{operation_id}")

    def replay(
        self,
        *,
        job: str | None = None,
        scheduled_after: Time | None = None,
        scheduled_before: Time | None = None,
        error_kind: str | None = None,
        status_code: int | None = None,
        idempotency_key: str | None = None,
    ) -> Operation:
        """Replay every dead letter matching the filters (any number of them)."""
        body = {"job": job, "error_kind": error_kind, "status_code": status_code}
        body.update(scheduled_after=when(scheduled_after), scheduled_before=when(scheduled_before))
        key = idempotency_key or str(uuid.uuid4())
        json = {k: v for k, v in body.items() if v is not None}
        return self._run("POST", "/operations/replay", json=json, headers={"Idempotency-Key": key})

    def backfill(self, job: str, *, start: Time, end: Time, idempotency_key: str | None = None) -> Operation:
        """A run for every occurrence of ``job`` in ``(start, end]``, up to ``max_backfill_runs``."""
        key = idempotency_key or str(uuid.uuid4())
        body = {"job": job, "start": when(start), "end": when(end)}
        return self._run("POST", "/operations/backfill", json=body, headers={"Idempotency-Key": key})

    def export(self, *, start: Time, end: Time, idempotency_key: str | None = None) -> Operation:
        """Archive every run created in ``[start, end)`` (nothing is deleted)."""
        key = idempotency_key or str(uuid.uuid4())
        body = {"start": when(start), "end": when(end)}
        return self._run("POST", "/operations/export", json=body, headers={"Idempotency-Key": key})

    def prune(self, *, idempotency_key: str | None = None) -> Operation:
        """The tenant's retention pass now: runs past the retention are archived, then deleted."""
        key = idempotency_key or str(uuid.uuid4())
        return self._run("POST", "/operations/prune", json={}, headers={"Idempotency-Key": key})


class StatsResource(_Resource):
    def get(self, *, window: str = "hour", limit: int | None = None) -> Stats:
        """Delivery health per job and per endpoint host over the last hour or day."""
        return self._run("GET", "/stats", params=clean_params({"window": window, "limit": limit}))


# The schema's operationId -> "resource.method" on the client.
OPERATIONS = {
    "api_keys_list": "api_keys.list",
    "api_keys_create": "api_keys.create",
    "api_keys_destroy": "api_keys.revoke",
    "archives_list": "archives.list",
    "archives_download": "archives.download",
    "jobs_list": "jobs.list",
    "jobs_create": "jobs.create",
    "jobs_batch_create": "jobs.create_many",
    "jobs_retrieve": "jobs.get",
    "jobs_partial_update": "jobs.update",
    "jobs_destroy": "jobs.delete",
    "jobs_backfill_create": "jobs.backfill",
    "jobs_pause_create": "jobs.pause",
    "jobs_resume_create": "jobs.resume",
    "jobs_runs_list": "jobs.runs",
    "jobs_trigger_create": "jobs.trigger",
    "operations_list": "operations.list",
    "operations_retrieve": "operations.get",
    "operations_replay": "operations.replay",
    "operations_backfill": "operations.backfill",
    "operations_export": "operations.export",
    "operations_prune": "operations.prune",
    "runs_list": "runs.list",
    "runs_retrieve": "runs.get",
    "runs_cancel_create": "runs.cancel",
    "runs_replay_create": "runs.replay",
    "runs_replay_many": "runs.replay_many",
    "schedules_preview_create": "schedules.preview",
    "signing_secret_retrieve": "signing_secret.get",
    "signing_secret_rotate_create": "signing_secret.rotate",
    "stats_retrieve": "stats.get",
}
