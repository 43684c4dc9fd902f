"""A tenant's own delivery health, per job and per endpoint host, over the last hour or day
(issue #13, deliverable 6: GET /api/v1/stats and the dashboard's health table).

For each job and each host its jobs deliver to: attempts, the share that succeeded (a 2xx),
runs that succeeded or were dead-lettered, fire lag p95 (first attempts only: a retry's start
says nothing about firing on time, and a backfill's occurrences are in the past on purpose), and
the last failure with its reason. An operator has the same numbers fleet-wide in Prometheus; this
is what a tenant needs to tell "my endpoint is down" from "Chime is late".

Computed in Python over the window's attempts (at most MAX_ATTEMPTS, the most recent first, and
flagged `sampled` beyond), found through the tenant's runs created in the window plus a day's
slack for retries (the (tenant, created_at) index), so the cost follows the tenant's own traffic,
not the table's size. Works on SQLite (embedded mode) and PostgreSQL.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from .models import JobRun, RunAttempt, RunStatus, Trigger
from .stats import percentile

WINDOWS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
RETRY_SLACK = timedelta(days=1)  # a run created this long before the window may still be retrying in it
MAX_ATTEMPTS = 50000


@dataclass
class Failure:
    at: datetime
    reason: str


@dataclass
class Health:
    attempts: int = 0
    succeeded_attempts: int = 0
    runs_succeeded: int = 0
    runs_failed: int = 0
    lags: list[float] = field(default_factory=list, repr=False)
    last_failure: Failure | None = None

    @property
    def success_ratio(self) -> float | None:
        return round(self.succeeded_attempts / self.attempts, 4) if self.attempts else None

    @property
    def fire_lag_p95_seconds(self) -> float | None:
        p95 = percentile(self.lags, 0.95)
        return None if p95 is None else round(p95, 3)

    def add_attempt(self, *, ok: bool, at: datetime, reason: str, lag: float | None) -> None:
        self.attempts += 1
        self.succeeded_attempts += ok
        if lag is not None:
            self.lags.append(lag)
        if not ok and (self.last_failure is None or at > self.last_failure.at):
            self.last_failure = Failure(at=at, reason=reason)


@dataclass
class Reliability:
    window: str
    since: datetime
    until: datetime
    jobs: dict  # job id -> (name, Health)
    hosts: dict  # host -> Health
    sampled: bool


def failure_reason(status_code: int | None, error_kind: str, error: str) -> str:
    if status_code:
        return f"HTTP {status_code}"
    return f"{error_kind}: {error}" if error_kind and error else (error_kind or error or "unknown")


def tenant_reliability(*, tenant, now: datetime, window: str = "hour") -> Reliability:
    since = now - WINDOWS[window]
    runs = JobRun.objects.for_tenant(tenant).filter(created_at__gte=since - RETRY_SLACK)
    attempts = list(
        RunAttempt.objects.filter(run__in=runs, started_at__gte=since)
        .order_by("-started_at")
        .values_list(
            "run__definition_id", "run__definition__name", "run__definition__target_url", "number",
            "started_at", "finished_at", "status_code", "error_kind", "error", "run__scheduled_for", "run__trigger",
        )[:MAX_ATTEMPTS]
    )  # fmt: skip
    jobs: dict = {}
    hosts: dict = {}
    for row in attempts:
        job_id, name, url, number, started_at, finished_at, status_code, kind, error, scheduled_for, trigger = row
        ok = status_code is not None and 200 <= status_code < 300
        lag = None
        if number == 1 and trigger != Trigger.BACKFILL:
            lag = max((started_at - scheduled_for).total_seconds(), 0.0)
        reason = failure_reason(status_code, kind, error)
        at = finished_at or started_at
        host = urlsplit(url).hostname or "?"
        jobs.setdefault(job_id, (name, Health()))[1].add_attempt(ok=ok, at=at, reason=reason, lag=lag)
        hosts.setdefault(host, Health()).add_attempt(ok=ok, at=at, reason=reason, lag=lag)
    outcomes = (
        runs.filter(finished_at__gte=since, status__in=[RunStatus.SUCCEEDED, RunStatus.FAILED])
        .values_list("definition_id", "definition__target_url", "status")
        .order_by()
    )
    for job_id, url, status in outcomes:
        name_health = jobs.get(job_id)
        host_health = hosts.get(urlsplit(url).hostname or "?")
        for health in (name_health[1] if name_health else None, host_health):
            if health is None:
                continue
            if status == RunStatus.SUCCEEDED:
                health.runs_succeeded += 1
            else:
                health.runs_failed += 1
    return Reliability(
        window=window, since=since, until=now, jobs=jobs, hosts=hosts, sampled=len(attempts) >= MAX_ATTEMPTS
    )
