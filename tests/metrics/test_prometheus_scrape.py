"""A real Prometheus scrapes a running stack through a scenario of known size (issue #13,
acceptance): 500 runs of which 400 succeed, 50 fail (dead letter) and 50 fail once then succeed.
The scraped counters and histograms must agree with the database's truth."""

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.models import JobRun, RunAttempt, RunStatus, ScheduleType
from apps.jobs.services import job_create
from apps.tenants.selectors import signing_secrets_valid
from tests.support.processes import start_scheduler, start_worker, wait_until
from tests.support.prometheus import Prometheus, Target
from tests.support.receiver import Receiver, Reply
from tests.support.web import free_port, start_web

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(360)]

TOKEN = "scrape-token-for-the-test"
OK, FAIL, FLAKY = 400, 50, 50


def jobs(tenant, n, *, url, run_at, attempts):
    for i in range(n):
        job_create(
            tenant=tenant,
            name=f"{url.rsplit('/', 1)[-1]}-{i}",
            schedule_type=ScheduleType.ONCE,
            run_at=run_at,
            target_url=url,
            retry_max_attempts=attempts,
            retry_initial_backoff_seconds=1,
        )


@pytest.fixture
def receiver_with_failures(tenant):
    server = Receiver(secrets=signing_secrets_valid(tenant=tenant)).start()
    tries: Counter = Counter()

    def respond(delivery):
        if delivery.path.startswith("/fail"):
            return Reply(status=500)
        if delivery.path.startswith("/flaky"):
            tries[delivery.webhook_id] += 1
            return Reply(status=503 if tries[delivery.webhook_id] == 1 else 200)
        return Reply()

    server.respond = respond
    yield server
    server.stop()


def scraped(prometheus: Prometheus, expr: str) -> dict:
    return {tuple(sorted((k, v) for k, v in labels.items() if k not in ("job", "instance"))): value
            for labels, value in prometheus.query(expr)}  # fmt: skip


def test_scraped_metrics_match_the_database(tenant, receiver_with_failures, tmp_path):
    worker_port, scheduler_port = free_port(), free_port()
    web = start_web(CHIME_METRICS_TOKEN=TOKEN)
    worker = start_worker(CHIME_METRICS_PORT=str(worker_port))
    scheduler = start_scheduler(CHIME_METRICS_PORT=str(scheduler_port))
    prometheus = None
    try:
        web.wait_ready()
        prometheus = Prometheus(
            tmp_path / "prometheus",
            [
                Target("chime-web", web.url.removeprefix("http://"), bearer_token=TOKEN),
                Target("chime-worker", f"127.0.0.1:{worker_port}"),
                Target("chime-scheduler", f"127.0.0.1:{scheduler_port}"),
            ],
        ).start()
        wait_until(lambda: prometheus.targets_up() == {"chime-web": 1, "chime-worker": 1, "chime-scheduler": 1},
                   timeout=60, message="Prometheus scrapes web, worker and scheduler")  # fmt: skip

        url = receiver_with_failures.url
        run_at = timezone.now() + timedelta(seconds=3)
        jobs(tenant, OK, url=f"{url}/ok", run_at=run_at, attempts=1)
        jobs(tenant, FAIL, url=f"{url}/fail", run_at=run_at, attempts=1)
        jobs(tenant, FLAKY, url=f"{url}/flaky", run_at=run_at, attempts=3)
        total = OK + FAIL + FLAKY
        terminal = (RunStatus.SUCCEEDED, RunStatus.FAILED)
        wait_until(lambda: JobRun.objects.filter(status__in=terminal).count() == total, timeout=180,
                   message="every run ended")  # fmt: skip

        truth_outcomes = Counter(JobRun.objects.values_list("status", flat=True))
        assert truth_outcomes == {RunStatus.SUCCEEDED: OK + FLAKY, RunStatus.FAILED: FAIL}
        retried = RunAttempt.objects.exclude(status_code__range=(200, 299)).filter(run__status=RunStatus.SUCCEEDED)
        codes = Counter(f"{code // 100}xx" for code in RunAttempt.objects.values_list("status_code", flat=True))
        expected = {
            (("outcome", "succeeded"), ("priority", "default")): OK + FLAKY,
            (("outcome", "failed"), ("priority", "default")): FAIL,
            (("outcome", "retried"), ("priority", "default")): retried.count(),
        }
        assert retried.count() == FLAKY

        def settled():
            return scraped(prometheus, "sum by (outcome, priority) (chime_runs_total)") == expected

        wait_until(settled, timeout=30, message="the scraped run counters reach the database's")
        durations = scraped(prometheus, "sum by (outcome_class) (chime_delivery_duration_seconds_count)")
        assert durations == {(("outcome_class", k),): v for k, v in codes.items()}
        assert codes == {"2xx": OK + FLAKY, "5xx": FAIL + FLAKY}

        lags = [
            (first.started_at - first.run.scheduled_for).total_seconds()
            for first in RunAttempt.objects.filter(number=1).select_related("run")
        ]
        assert prometheus.value("sum(chime_fire_lag_seconds_count)") == total
        lag_sum = prometheus.value("sum(chime_fire_lag_seconds_sum)")
        assert abs(lag_sum - sum(lags)) <= max(1.0, 0.05 * sum(lags)), (lag_sum, sum(lags))
        assert prometheus.value("sum(chime_materialized_runs_total)") == total
        # The gauges are read from the database at each scrape (every 1 s): the next one after the
        # last run ended shows nothing ready.
        wait_until(lambda: prometheus.value('max(chime_ready_runs{priority="default"})') == 0, timeout=15,
                   message="the scraped ready-runs gauge reaches 0")  # fmt: skip
        assert prometheus.value("max(chime_live_schedulers)") == 1
    finally:
        if prometheus:
            prometheus.stop()
        scheduler.stop()
        worker.stop()
        web.stop()
