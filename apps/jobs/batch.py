"""Creating many jobs at once (`POST /api/v1/jobs/batch`): all or nothing, one transaction, one
bulk insert, the jobs quota checked for the whole batch.

Why a batch and not N creates: one create through the API costs ~7 ms of web CPU (framework,
authentication, throttle, its own transaction and commit), so a tenant registering 20,000 jobs
waited minutes; a batch pays those once and inserts its rows with one statement.
"""

from django.db import transaction
from django.utils import timezone

from apps.tenants import quotas
from apps.tenants.models import Tenant

from .models import JobDefinition, JobStatus, ScheduleType, partition_for
from .services import InvalidSchedule, _check_job_slot, _check_retry_policy, check_run_at, initial_next_fire_at

MAX_BATCH_JOBS = 1000
# A batch weighs on the tenant's API rate limit as one request per this many jobs (rounded up):
# its cost on the server grows with its size (docs/api.md#batch-create says why this number).
JOBS_PER_API_REQUEST = 10


def api_request_weight(jobs: int) -> int:
    """How many API requests a batch of `jobs` counts as (at least 1)."""
    return max(1, -(-jobs // JOBS_PER_API_REQUEST))


class BatchInvalid(Exception):
    """Some items of a batch cannot be created; nothing was. `errors`: item index -> the
    exceptions for that item (InvalidSchedule, QuotaExceeded with a field), for the interface to
    name as `jobs.<index>.<field>`."""

    def __init__(self, errors: dict[int, list[Exception]]):
        super().__init__(f"{len(errors)} of the batch's jobs are invalid.")
        self.errors = errors


def batch_item_errors(*, tenant: Tenant, items: list[dict], now=None) -> dict[int, list[Exception]]:
    """The checks job_create makes before inserting (a `once` job's run_at within the lookback, the
    tenant's retry limits), for every item: each item's problems, not only the first item's."""
    now = now or timezone.now()
    errors: dict[int, list[Exception]] = {}
    for index, fields in enumerate(items):
        for check in (
            lambda f=fields: check_run_at(f.get("schedule_type"), f.get("run_at"), now=now),
            lambda f=fields: _check_retry_policy(tenant, f),
        ):
            try:
                check()
            except (InvalidSchedule, quotas.QuotaExceeded) as error:
                errors.setdefault(index, []).append(error)
    return errors


def _definition(tenant: Tenant, fields: dict, now) -> JobDefinition:
    """What job_create builds and JobDefinition.save() completes (bulk_create calls no save())."""
    fields = dict(fields)
    enabled = fields.pop("enabled", True)
    definition = JobDefinition(tenant=tenant, **fields)
    if definition.schedule_type == ScheduleType.ONCE and definition.run_at is None:
        definition.run_at = now
    definition.status = JobStatus.ACTIVE if enabled else JobStatus.PAUSED
    definition.next_fire_at = initial_next_fire_at(definition, now)
    definition.partition = partition_for(definition.id)
    return definition


@transaction.atomic
def jobs_create_batch(*, tenant: Tenant, items: list[dict]) -> list[JobDefinition]:
    """Create every job of `items` (JobDefinition fields plus `enabled`, validated by the caller, as
    for job_create), in order, or none.

    Raises BatchInvalid naming every bad item, or QuotaExceeded (403) when the batch would take the
    tenant past its jobs quota: the whole batch is refused, not its first few jobs created. The
    rows go in with one multi-row INSERT; the quota lock is taken after it, before the commit
    (apps/jobs/services.py, _check_job_slot)."""
    if not 1 <= len(items) <= MAX_BATCH_JOBS:
        raise ValueError(f"A batch holds 1 to {MAX_BATCH_JOBS} jobs, not {len(items)}.")
    now = timezone.now()
    errors = batch_item_errors(tenant=tenant, items=items, now=now)
    if errors:
        raise BatchInvalid(errors)
    definitions = [_definition(tenant, fields, now) for fields in items]
    JobDefinition.objects.bulk_create(definitions, batch_size=MAX_BATCH_JOBS)
    _check_job_slot(tenant, inserted=len(definitions), adding=len(definitions))
    return definitions
