"""What to run and when (JobDefinition), one execution (JobRun), one delivery try (RunAttempt)."""

import hashlib
import zlib
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.core.models import TenantQuerySet, UUIDModel
from apps.tenants.models import Tenant

from .attempt_headers import attempt_sent_headers
from .schedules import CronSchedule, DstPolicy
from .secrets import EncryptedHeadersField, visible_headers


def partition_for(definition_id) -> int:
    """Stable partition of a definition: a hash of its id, never of mutable fields."""
    return zlib.crc32(definition_id.bytes) % settings.CHIME_PARTITIONS


class ScheduleType(models.TextChoices):
    CRON = "cron"
    ONCE = "once"


class Priority(models.TextChoices):
    HIGH = "high"
    DEFAULT = "default"
    LOW = "low"


class MisfirePolicy(models.TextChoices):
    CATCH_UP = "catch_up"  # every missed occurrence, up to catch_up_limit
    SKIP = "skip"  # only what is on time; missed ones are recorded as skipped
    COALESCE = "coalesce"  # one run for the whole gap


class DstGap(models.TextChoices):
    SHIFT = "shift"
    SKIP = "skip"


class DstOverlap(models.TextChoices):
    FIRST = "first"
    BOTH = "both"


class ConcurrencyPolicy(models.TextChoices):
    ALLOW = "allow"  # runs of one job may overlap
    FORBID = "forbid"  # a new run while one is running or retrying is skipped
    REPLACE = "replace"  # a new run cancels the running or retrying one


class JobStatus(models.TextChoices):
    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"  # a `once` job whose run has been materialized
    DELETED = "deleted"  # stopped by DELETE; kept for its run history


# The statuses of jobs that no longer count against the tenant's jobs quota (max_jobs).
LIVE_EXCLUDED = (JobStatus.DELETED.value, JobStatus.COMPLETED.value)


class JobDefinition(UUIDModel):
    # No index of its own (db_index=False): jobdef_tenant_created_idx leads with tenant and serves
    # every lookup by tenant, and the scheduler rewrites each definition it fires (next_fire_at is
    # indexed, so never a HOT update): one index fewer to write per fire and per create (issue #12).
    # jobdef_tenant_live_idx (Meta) is on tenant too, for the quota's count, and costs that write
    # again for live jobs: ~2 µs of PostgreSQL per cron advance (docs/benchmarks.md).
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs", db_index=False)
    name = models.CharField(max_length=200)

    schedule_type = models.CharField(max_length=8, choices=ScheduleType.choices)
    cron_expression = models.CharField(max_length=120, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    run_at = models.DateTimeField(null=True, blank=True)
    dst_gap = models.CharField(max_length=8, choices=DstGap.choices, default=DstGap.SHIFT)
    dst_overlap = models.CharField(max_length=8, choices=DstOverlap.choices, default=DstOverlap.FIRST)
    misfire_policy = models.CharField(max_length=16, choices=MisfirePolicy.choices, default=MisfirePolicy.CATCH_UP)
    catch_up_limit = models.PositiveIntegerField(default=100)
    # Deterministic per-job delay in [0, jitter_seconds], derived from the id (see jitter_offset).
    jitter_seconds = models.PositiveIntegerField(default=0)
    concurrency_policy = models.CharField(
        max_length=8, choices=ConcurrencyPolicy.choices, default=ConcurrencyPolicy.ALLOW
    )
    # Circuit breaker: this many runs in a row ending `failed` pause the job (0 = never).
    failure_threshold = models.PositiveIntegerField(default=10)
    consecutive_failures = models.PositiveIntegerField(default=0)

    target_url = models.CharField(max_length=2048)
    target_method = models.CharField(max_length=8, default="POST")
    # Values encrypted at rest, clear in Python (apps/jobs/secrets.py).
    target_headers = EncryptedHeadersField(default=dict, blank=True)
    # Header names the tenant marked secret, on top of the credential-like names: redacted when shown.
    secret_header_names = models.JSONField(default=list, blank=True)
    target_body = models.JSONField(null=True, blank=True)

    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.DEFAULT)
    timeout_seconds = models.PositiveIntegerField(default=30)
    retry_max_attempts = models.PositiveIntegerField(default=5)
    retry_initial_backoff_seconds = models.PositiveIntegerField(default=10)
    retry_max_backoff_seconds = models.PositiveIntegerField(default=3600)

    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.ACTIVE)
    status_reason = models.CharField(max_length=500, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    partition = models.SmallIntegerField(editable=False)
    # When the scheduler must next look at this job; NULL when nothing more will fire.
    next_fire_at = models.DateTimeField(null=True, blank=True)
    # The latest occurrence materialized as a run (the scheduler's high-water mark).
    last_scheduled_for = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        indexes = [
            # The due-scan: `status='active' AND next_fire_at <= now ORDER BY next_fire_at`,
            # filtered by the shard's partitions inside the index. Partial, so paused and finished
            # jobs cost nothing, and "nothing due" is an empty index range.
            models.Index(
                fields=["next_fire_at", "partition"],
                name="jobdef_due_idx",
                condition=Q(status="active", next_fire_at__isnull=False),
            ),
            models.Index(fields=["tenant", "-created_at"], name="jobdef_tenant_created_idx"),
            # The jobs quota's count (apps/jobs/services.py, under the tenant's lock on every
            # create): an index-only scan of the tenant's live jobs. Without it the count read
            # every job the tenant ever had, completed and deleted ones included (they are kept
            # for their runs' history): 42 ms per create at 300,000 completed jobs, 0.1-0.4 with it.
            # Its price: a cron job's advance writes an entry in it too (13.6-13.8 -> 15.5-16.3 µs
            # of PostgreSQL per advance, measured); a once job that completes leaves it.
            models.Index(fields=["tenant"], name="jobdef_tenant_live_idx", condition=~Q(status__in=LIVE_EXCLUDED)),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        if self.partition is None:
            self.partition = partition_for(self.id)
        super().save(*args, **kwargs)

    @property
    def enabled(self) -> bool:
        return self.status != JobStatus.PAUSED

    @property
    def jitter_offset(self) -> timedelta:
        """Stable across restarts and processes: a hash of the id, not a random draw."""
        if not self.jitter_seconds:
            return timedelta(0)
        digest = hashlib.sha256(self.id.bytes).digest()
        return timedelta(seconds=int.from_bytes(digest[:8], "big") % (self.jitter_seconds + 1))

    @property
    def visible_target_headers(self) -> dict[str, str]:
        """The target headers with secret values redacted (apps/jobs/secrets.py)."""
        return visible_headers(self)

    def schedule(self) -> CronSchedule:
        return CronSchedule.parse(self.cron_expression, self.timezone, DstPolicy(self.dst_gap, self.dst_overlap))


class RunStatus(models.TextChoices):
    SCHEDULED = "scheduled"  # row exists; waits for available_at
    QUEUED = "queued"  # on the broker
    RUNNING = "running"  # a worker holds the lease
    RETRYING = "retrying"  # waits in the database until available_at
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # dead letter; replayable
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


# Releasable and due, as SQL that may use jobrun_due_idx (its planner fence: the index's comment).
RELEASABLE_DUE_SQL = "status IN ('scheduled', 'retrying') AND attempt_count >= 0 AND available_at <= {now}"

# Not yet handed to a worker (or waiting between attempts): safe to cancel outright.
UNSTARTED_RUN_STATUSES = ("scheduled", "queued", "retrying")
TERMINAL_RUN_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.SKIPPED)


class Trigger(models.TextChoices):
    SCHEDULE = "schedule"
    MANUAL = "manual"
    BACKFILL = "backfill"


class JobRun(UUIDModel):
    # No index of their own (db_index=False): every run write updates every index of this table
    # (a status change is never a HOT update: status is in the partial indexes' predicates), and
    # jobrun_tenant_created_idx / jobrun_unique_occurrence already lead with these columns.
    # `tenant` is the definition's tenant, copied (a run is scoped without a join): no constraint in
    # the database (db_constraint=False). It added no integrity to the definition's own (the tenant
    # exists if the definition does) and cost a deferred trigger's lookup and row lock per
    # inserted run; what matters, that it equals the definition's tenant, no foreign key could
    # say, and `audit_runs` checks it (run_tenant_mismatch). Deletes still cascade (in Django).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="runs", db_index=False, db_constraint=False
    )
    definition = models.ForeignKey(JobDefinition, on_delete=models.CASCADE, related_name="runs", db_index=False)
    # Copied from the definition so release and routing need no join.
    partition = models.SmallIntegerField()
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.DEFAULT)

    scheduled_for = models.DateTimeField()  # the occurrence this run stands for
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULE)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.SCHEDULED)
    status_reason = models.CharField(max_length=500, blank=True)
    # When the run may next be handed to a worker: its fire time, then each retry's time.
    available_at = models.DateTimeField()
    attempt_count = models.PositiveIntegerField(default=0)
    # attempt_count when the run was last replayed: a replay gets a fresh retry budget while
    # attempt numbers keep counting up (RunAttempt.number stays unique per run).
    attempts_before_replay = models.PositiveIntegerField(default=0)
    # A coalesced run stands for several missed occurrences; a skipped summary row for many.
    coalesced_count = models.PositiveIntegerField(null=True, blank=True)
    coalesced_first_at = models.DateTimeField(null=True, blank=True)
    coalesced_last_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            # Invariant 1: one run per occurrence, whatever runs twice or dies.
            models.UniqueConstraint(fields=["definition", "scheduled_for"], name="jobrun_unique_occurrence"),
        ]
        indexes = [
            # Release: is anything due at all, and how overdue (RELEASABLE_DUE in apps/jobs/models.py).
            # Its condition carries `attempt_count >= 0`, true of every row (a CHECK constraint),
            # as a fence for the planner: a query must say it to use this index. The fair release
            # (apps/scheduler/fairness.py) does not, so it always reads jobrun_tenant_releasable_idx.
            # Without the fence, statistics taken while nearly every run was finished (any steady
            # state) made the planner read *all* due runs through this index for each tenant's
            # probe at the top of the hour: ~1 s per release tick at 100,000 due runs, a 100,000
            # spike materialized in 136 s instead of 11 (docs/benchmarks.md).
            models.Index(
                fields=["available_at", "partition"],
                name="jobrun_due_idx",
                condition=Q(status__in=["scheduled", "retrying"], attempt_count__gte=0),
            ),
            # Fair release: a skip scan over tenants with releasable runs, then each tenant's first.
            models.Index(
                fields=["tenant", "priority", "available_at"],
                name="jobrun_tenant_releasable_idx",
                condition=Q(status__in=["scheduled", "retrying"]),
            ),
            # Recovery sweeps: queued runs nobody took, running runs whose lease ran out.
            models.Index(fields=["priority", "queued_at"], name="jobrun_queued_idx", condition=Q(status="queued")),
            models.Index(fields=["lease_expires_at"], name="jobrun_running_idx", condition=Q(status="running")),
            models.Index(fields=["tenant", "-created_at"], name="jobrun_tenant_created_idx"),
            # Dead letters, the latest failure first (the dashboard) and newest first by id (the API's
            # ?status=failed): partial, so only the few failed row versions are indexed. Without them,
            # a tenant's dead-letter page sorted all its failed runs (2.1 s at 10M runs, bench/history.py).
            models.Index(
                fields=["tenant", "-finished_at", "-created_at"],
                name="jobrun_dead_letters_idx",
                condition=Q(status="failed"),
            ),
            models.Index(fields=["tenant", "-id"], name="jobrun_failed_id_idx", condition=Q(status="failed")),
            # A job's runs newest first (listings, selectors) read jobrun_unique_occurrence
            # (definition, scheduled_for) backwards: no index of their own (issue #12).
        ]

    def __str__(self) -> str:
        return f"{self.definition_id}@{self.scheduled_for.isoformat()}"


class ErrorKind(models.TextChoices):
    NETWORK = "network"
    TIMEOUT = "timeout"
    REFUSED = "refused"  # SSRF guard
    INVALID_TARGET = "invalid_target"
    HTTP = "http"  # the endpoint answered with a non-2xx status
    WORKER_LOST = "worker_lost"


class RunAttempt(UUIDModel):
    """One delivery try. Written when the try ends (or when its worker is found dead)."""

    # runattempt_unique_number (run, number) serves every lookup by run: no index of its own.
    # No constraint in the database (db_constraint=False): an attempt is only ever inserted in the
    # transaction that updates its run under the run's lease (the run exists, locked), and its
    # deferred check cost a lookup and a row lock of the run (a WAL record) per attempt: ~20 µs
    # of PostgreSQL's CPU per run (issue #12, docs/benchmarks.md). Deletes still cascade (in
    # Django), prune deletes attempts first, and `audit_runs` reports an attempt without its run.
    run = models.ForeignKey(
        JobRun, on_delete=models.CASCADE, related_name="attempts", db_index=False, db_constraint=False
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=1000, blank=True)
    error_kind = models.CharField(max_length=16, choices=ErrorKind.choices, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True)
    request_headers = models.JSONField(default=dict, blank=True)
    worker = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="runattempt_unique_number")]
        ordering = ["number"]

    @property
    def sent_headers(self) -> dict[str, str]:
        """The request headers as sent (signature aside, secrets redacted): `request_headers` keeps
        them less those derived from the run and the attempt's number (apps/jobs/attempt_headers.py)."""
        return attempt_sent_headers(self)
