"""GET /api/v1/stats (issue #13, deliverable 6): a tenant's delivery health per job and per endpoint
host, from its runs' attempts, never another tenant's; bad parameters are a 400 per field."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.models import JobRun, RunAttempt, RunStatus, Trigger
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def run_with_attempts(job, *, lag_seconds: float, codes: list, status, ago_minutes=5, trigger=Trigger.SCHEDULE, n=0):
    """A run of `job` whose attempts answered `codes` in turn (None: a timeout), the first one
    starting `lag_seconds` after its scheduled time."""
    scheduled_for = timezone.now() - timedelta(minutes=ago_minutes, microseconds=n)
    run = JobRun.objects.create(
        tenant=job.tenant,
        definition=job,
        partition=job.partition,
        scheduled_for=scheduled_for,
        available_at=scheduled_for,
        status=status,
        trigger=trigger,
        attempt_count=len(codes),
        finished_at=timezone.now() if status in (RunStatus.SUCCEEDED, RunStatus.FAILED) else None,
    )
    for number, code in enumerate(codes, start=1):
        started = scheduled_for + timedelta(seconds=lag_seconds + 10 * (number - 1))
        RunAttempt.objects.create(
            run=run,
            number=number,
            started_at=started,
            finished_at=started + timedelta(milliseconds=200),
            status_code=code,
            error_kind="" if code else "timeout",
            error="" if code else "no answer within 10 s",
        )
    return run


def test_health_per_job_and_host_from_the_attempts(api, tenant, other_tenant):
    flaky = JobFactory(tenant=tenant, name="flaky", target_url="https://hooks.example.com/a")
    steady = JobFactory(tenant=tenant, name="steady", target_url="https://api.example.org/b")
    run_with_attempts(flaky, lag_seconds=0.5, codes=[500, None, 200], status=RunStatus.SUCCEEDED, n=1)
    run_with_attempts(flaky, lag_seconds=1.5, codes=[503, 503], status=RunStatus.FAILED, n=2)
    for i in range(4):
        run_with_attempts(steady, lag_seconds=0.1 * (i + 1), codes=[200], status=RunStatus.SUCCEEDED, n=10 + i)
    run_with_attempts(steady, lag_seconds=90, codes=[200], status=RunStatus.SUCCEEDED, trigger=Trigger.BACKFILL, n=20)
    run_with_attempts(steady, lag_seconds=0.1, codes=[200], status=RunStatus.SUCCEEDED, ago_minutes=120, n=30)
    stranger = JobFactory(tenant=other_tenant, name="theirs", target_url="https://hooks.example.com/x")
    run_with_attempts(stranger, lag_seconds=0.1, codes=[500], status=RunStatus.FAILED, n=40)

    body = api.get("/api/v1/stats").json()
    assert body["window"] == "hour" and body["sampled"] is False
    by_name = {job["name"]: job for job in body["jobs"]}
    assert list(by_name) == ["flaky", "steady"], "the worst first; another tenant's jobs never"
    flaky_health = by_name["flaky"]
    assert (flaky_health["attempts"], flaky_health["succeeded_attempts"]) == (5, 1)
    assert flaky_health["success_ratio"] == 0.2
    assert (flaky_health["runs_succeeded"], flaky_health["runs_failed"]) == (1, 1)
    assert flaky_health["fire_lag_p95_seconds"] == 1.5
    assert flaky_health["last_failure_reason"] == "HTTP 503" and flaky_health["last_failure_at"]
    steady_health = by_name["steady"]
    assert steady_health["attempts"] == 5, "the attempt two hours ago is outside the window"
    assert steady_health["success_ratio"] == 1.0 and steady_health["last_failure_reason"] is None
    assert steady_health["fire_lag_p95_seconds"] == 0.4, "a backfill's lateness is not fire lag"
    hosts = {host["host"]: host for host in body["hosts"]}
    assert set(hosts) == {"hooks.example.com", "api.example.org"}
    assert hosts["hooks.example.com"]["attempts"] == 5, "the other tenant's attempt at the same host is not counted"

    day = api.get("/api/v1/stats", {"window": "day", "limit": 1}).json()
    assert [job["name"] for job in day["jobs"]] == ["flaky"]
    assert len(day["hosts"]) == 1


def test_a_timeout_is_named_as_the_reason(api, tenant):
    job = JobFactory(tenant=tenant, target_url="https://slow.example.com/")
    run_with_attempts(job, lag_seconds=0.2, codes=[None], status=RunStatus.RETRYING)
    (health,) = api.get("/api/v1/stats").json()["jobs"]
    assert health["last_failure_reason"] == "timeout: no answer within 10 s"
    assert health["runs_failed"] == 0 and health["runs_succeeded"] == 0


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"window": "week"}, "window"),
        ({"limit": "0"}, "limit"),
        ({"limit": "5000"}, "limit"),
        ({"tenant": "x"}, "tenant"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_field(api, query, field):
    response = api.get("/api/v1/stats", query)
    assert response.status_code == 400
    assert field in str(response.json())


def test_stats_need_an_api_key(client):
    assert client.get("/api/v1/stats").status_code == 401
