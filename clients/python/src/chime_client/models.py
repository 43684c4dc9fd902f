"""Chime API types, generated from the OpenAPI schema by ``python -m chime_client._codegen``.

Do not edit: regenerate (clients/python/tests/test_models.py fails when this file and the
server's schema disagree). Responses are plain dicts shaped like these TypedDicts.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

ArchiveKindEnum = Literal["prune", "export"]
BlankEnum = Literal[""]
ConcurrencyPolicyEnum = Literal["allow", "forbid", "replace"]
DstEnum = Literal["gap", "overlap"]
ErrorKindEnum = Literal["network", "timeout", "refused", "invalid_target", "http", "worker_lost"]
GapEnum = Literal["shift", "skip"]
JobStatusEnum = Literal["active", "paused", "completed", "deleted"]
MethodEnum = Literal["POST", "PUT", "PATCH", "DELETE", "GET"]
MisfirePolicyEnum = Literal["catch_up", "skip", "coalesce"]
NullEnum = None
OperationKindEnum = Literal["replay", "backfill", "export", "prune"]
OverlapEnum = Literal["first", "both"]
PriorityEnum = Literal["high", "default", "low"]
RunStatusEnum = Literal["scheduled", "queued", "running", "retrying", "succeeded", "failed", "cancelled", "skipped"]
StateEnum = Literal["pending", "running", "succeeded", "failed"]
TriggerEnum = Literal["schedule", "manual", "backfill"]
TypeEnum = Literal["cron", "once"]
WindowEnum = Literal["hour", "day"]


class ApiKey(TypedDict):
    id: str
    name: str
    prefix: str
    created_at: str
    last_used_at: str | None
    revoked_at: str | None


class ApiKeyCreated(TypedDict):
    id: str
    name: str
    prefix: str
    created_at: str
    last_used_at: str | None
    revoked_at: str | None
    key: str


class ApiKeyInputRequest(TypedDict):
    name: NotRequired[str]


class Archive(TypedDict):
    id: str
    kind: ArchiveKindEnum
    day: str
    part: int
    run_count: int
    attempt_count: int
    bytes: int
    sha256: str
    created_at: str


class Attempt(TypedDict):
    number: int
    started_at: str
    finished_at: str | None
    status_code: NotRequired[int | None]
    error: NotRequired[str]
    error_kind: NotRequired[ErrorKindEnum | BlankEnum]
    duration_ms: NotRequired[int | None]
    response_excerpt: NotRequired[str]
    request_headers: dict[str, str]


class BackfillOperationInputRequest(TypedDict):
    """POST /jobs/{id}/backfill's body with the job: (start, end], at most max_backfill_runs occurrences."""

    start: str
    end: str
    job: str


class BackfillRequest(TypedDict):
    start: str
    end: str


class BackfillResult(TypedDict):
    created: int
    existing: int
    runs: list[Run]


class DstPolicyOut(TypedDict):
    gap: GapEnum
    overlap: OverlapEnum


class DstPolicyRequest(TypedDict):
    gap: NotRequired[GapEnum]
    overlap: NotRequired[OverlapEnum]


class Error(TypedDict):
    error: ErrorBody


class ErrorBody(TypedDict):
    code: str
    message: str
    fields: NotRequired[dict[str, list[str]]]
    limit: NotRequired[Limit]


class ExportOperationInputRequest(TypedDict):
    """Runs created in [start, end), whatever their status, archived without being deleted."""

    start: str
    end: str


class FireTime(TypedDict):
    utc: str
    local: str
    dst: DstEnum | NullEnum | None


class HostHealth(TypedDict):
    host: str
    attempts: int
    succeeded_attempts: int
    success_ratio: float | None
    runs_succeeded: int
    runs_failed: int
    fire_lag_p95_seconds: float | None
    last_failure_at: str | None
    last_failure_reason: str | None


class Job(TypedDict):
    """A job, as every response shows it (docs/api.md#jobs). Secret header values are `<redacted>`."""

    id: str
    name: str
    status: JobStatusEnum
    status_reason: str | None
    schedule: ScheduleOut
    target: TargetOut
    priority: PriorityEnum
    timeout_seconds: int
    retry: RetryOut
    enabled: bool
    dst_policy: DstPolicyOut
    misfire_policy: MisfirePolicyEnum
    catch_up_limit: int
    jitter_seconds: int
    concurrency_policy: ConcurrencyPolicyEnum
    failure_threshold: int
    consecutive_failures: int
    next_fire_at: str | None
    created_at: str
    updated_at: str


class JobBatch(TypedDict):
    """The jobs created, in the order they were sent."""

    jobs: list[Job]


class JobBatchInputRequest(TypedDict):
    """The jobs to create, all or none (each as in POST /jobs)."""

    jobs: list[JobInputRequest]


class JobDetail(TypedDict):
    """A job with its 20 most recent runs, newest first."""

    id: str
    name: str
    status: JobStatusEnum
    status_reason: str | None
    schedule: ScheduleOut
    target: TargetOut
    priority: PriorityEnum
    timeout_seconds: int
    retry: RetryOut
    enabled: bool
    dst_policy: DstPolicyOut
    misfire_policy: MisfirePolicyEnum
    catch_up_limit: int
    jitter_seconds: int
    concurrency_policy: ConcurrencyPolicyEnum
    failure_threshold: int
    consecutive_failures: int
    next_fire_at: str | None
    created_at: str
    updated_at: str
    recent_runs: list[Run]


class JobHealth(TypedDict):
    job_id: str
    name: str
    attempts: int
    succeeded_attempts: int
    success_ratio: float | None
    runs_succeeded: int
    runs_failed: int
    fire_lag_p95_seconds: float | None
    last_failure_at: str | None
    last_failure_reason: str | None


class JobInputRequest(TypedDict):
    name: str
    schedule: ScheduleRequest
    target: TargetRequest
    priority: NotRequired[PriorityEnum]
    timeout_seconds: NotRequired[int]
    retry: NotRequired[RetryRequest]
    enabled: NotRequired[bool]
    dst_policy: NotRequired[DstPolicyRequest]
    misfire_policy: NotRequired[MisfirePolicyEnum]
    catch_up_limit: NotRequired[int]
    jitter_seconds: NotRequired[int]
    concurrency_policy: NotRequired[ConcurrencyPolicyEnum]
    failure_threshold: NotRequired[int]


class Limit(TypedDict):
    name: str
    value: Any


class Operation(TypedDict):
    id: str
    kind: OperationKindEnum
    params: dict[str, Any]
    state: StateEnum
    progress: Progress
    result: dict[str, int] | None
    error: str | None
    created_by: str
    created_at: str
    finished_at: str | None


class PaginatedApiKeyList(TypedDict):
    results: list[ApiKey]
    next: str | None


class PaginatedArchiveList(TypedDict):
    results: list[Archive]
    next: str | None


class PaginatedJobList(TypedDict):
    results: list[Job]
    next: str | None


class PaginatedOperationList(TypedDict):
    results: list[Operation]
    next: str | None


class PaginatedRunList(TypedDict):
    results: list[Run]
    next: str | None


class PatchedJobInputRequest(TypedDict):
    name: NotRequired[str]
    schedule: NotRequired[ScheduleRequest]
    target: NotRequired[TargetRequest]
    priority: NotRequired[PriorityEnum]
    timeout_seconds: NotRequired[int]
    retry: NotRequired[RetryRequest]
    enabled: NotRequired[bool]
    dst_policy: NotRequired[DstPolicyRequest]
    misfire_policy: NotRequired[MisfirePolicyEnum]
    catch_up_limit: NotRequired[int]
    jitter_seconds: NotRequired[int]
    concurrency_policy: NotRequired[ConcurrencyPolicyEnum]
    failure_threshold: NotRequired[int]


class PreviewRequest(TypedDict):
    expression: str
    timezone: NotRequired[str]
    count: NotRequired[int]
    start: NotRequired[str | None]
    dst_policy: NotRequired[DstPolicyRequest]


class Progress(TypedDict):
    done: int
    total: int | None


class PruneOperationInputRequest(TypedDict):
    """No parameters: the tenant's retention says what goes (docs/api.md#operations)."""

    pass


class ReplayOperationInputRequest(TypedDict):
    """Which dead letters (runs `failed`): every given filter applies; none, the whole queue."""

    job: NotRequired[str]
    scheduled_after: NotRequired[str]
    scheduled_before: NotRequired[str]
    error_kind: NotRequired[ErrorKindEnum]
    status_code: NotRequired[int]


class Replayed(TypedDict):
    replayed: int


class RetryOut(TypedDict):
    max_attempts: int
    initial_backoff_seconds: int
    max_backoff_seconds: int


class RetryRequest(TypedDict):
    max_attempts: NotRequired[int]
    initial_backoff_seconds: NotRequired[int]
    max_backoff_seconds: NotRequired[int]


class Run(TypedDict):
    id: str
    job_id: str
    status: NotRequired[RunStatusEnum]
    status_reason: str | None
    trigger: NotRequired[TriggerEnum]
    scheduled_for: str
    attempt_count: NotRequired[int]
    created_at: str
    finished_at: str | None
    coalesced: Any


class RunDetail(TypedDict):
    id: str
    job_id: str
    status: NotRequired[RunStatusEnum]
    status_reason: str | None
    trigger: NotRequired[TriggerEnum]
    scheduled_for: str
    attempt_count: NotRequired[int]
    created_at: str
    finished_at: str | None
    coalesced: Any
    attempts: list[Attempt]


class RunFilterRequest(TypedDict):
    """Which runs: of one job, in one status, scheduled in a time range; every given filter applies."""

    job: NotRequired[str]
    status: NotRequired[RunStatusEnum]
    scheduled_after: NotRequired[str]
    scheduled_before: NotRequired[str]


class ScheduleOut(TypedDict):
    type: TypeEnum
    expression: str | None
    timezone: str | None
    run_at: str | None


class SchedulePreview(TypedDict):
    expression: str
    timezone: str
    fixed_time: bool
    fire_times: list[FireTime]


class ScheduleRequest(TypedDict):
    type: TypeEnum
    expression: NotRequired[str]
    timezone: NotRequired[str]
    run_at: NotRequired[str | None]


class SigningSecret(TypedDict):
    secret: str
    created_at: str


class Stats(TypedDict):
    window: WindowEnum
    since: str
    until: str
    sampled: bool
    jobs: list[JobHealth]
    hosts: list[HostHealth]


class TargetOut(TypedDict):
    url: str
    method: str
    headers: dict[str, str]
    secret_headers: list[str]
    body: Any


class TargetRequest(TypedDict):
    url: str
    method: NotRequired[MethodEnum]
    headers: NotRequired[dict[str, str]]
    secret_headers: NotRequired[list[str]]
    body: NotRequired[Any]
