"""Embedded mode (no Redis): live pages poll every 2 s and swap their whole table. What the user
opened or selected must survive the swap: an expanded "Attempts" row stays open (and shows the new
attempts when the run got some), a ticked dead letter stays ticked. Debian Chromium, a real uvicorn
with REDIS_URL unset; the data changes in the database between polls, as a worker would change it."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apps.jobs.models import ErrorKind, JobRun, RunAttempt, RunStatus
from apps.jobs.services import job_create
from apps.tenants.models import Membership, Role
from apps.tenants.services import tenant_create

from .browser import PASSWORD, chromium, free_port, require_chromium, screenshot, start_web
from .conftest import make_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]

# Counts the polls that swapped a live container in (htmx fires afterSettle on the new element).
COUNT_POLLS = """(containerId) => {
  window.__polls = 0;
  document.body.addEventListener('htmx:afterSettle', (event) => {
    if (event.target.id === containerId) window.__polls += 1;
  });
  window.__noReload = true;
}"""


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker):
    require_chromium()
    port = free_port()
    process = start_web(port, REDIS_URL="")  # embedded mode: live.mode == "poll"
    yield f"http://127.0.0.1:{port}"
    process.stop()


@pytest.fixture(scope="module")
def browser(web):
    with chromium() as browser:
        yield browser


@pytest.fixture
def owner():
    tenant = tenant_create(slug="acme", name="Acme")
    user = get_user_model().objects.create_user(username="owner@acme.test", email="owner@acme.test", password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=Role.OWNER)
    job = job_create(tenant=tenant, name="flaky-sync", schedule_type="cron", cron_expression="0 * * * *",
                     timezone="UTC", target_url="https://example.com/hook")  # fmt: skip
    return user, job


@pytest.fixture
def page(browser, web, owner, request):
    context = browser.new_context(base_url=web, viewport={"width": 1280, "height": 900}, timezone_id="UTC")
    context.set_default_timeout(15000)
    client = Client()
    client.force_login(owner[0])
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": web}])
    page = context.new_page()
    yield page
    screenshot(page, request.node.name)
    context.close()


def add_attempt(run: JobRun, *, status_code: int, excerpt: str, final: str | None = None) -> None:
    """What a worker records for one more attempt."""
    number = run.attempts.count() + 1
    started = timezone.now() - timedelta(seconds=1)
    RunAttempt.objects.create(
        run=run, number=number, started_at=started, finished_at=started + timedelta(milliseconds=80),
        status_code=status_code, error="" if status_code < 400 else f"HTTP {status_code}",
        error_kind="" if status_code < 400 else ErrorKind.HTTP, duration_ms=80, response_excerpt=excerpt,
        request_headers={"webhook-id": str(run.id)},
    )  # fmt: skip
    run.attempt_count = number
    run.status = final or RunStatus.RETRYING
    run.finished_at = timezone.now() if final else None
    run.save(update_fields=["attempt_count", "status", "finished_at"])


def wait_for_polls(page, count: int) -> None:
    target = page.evaluate("window.__polls") + count
    page.wait_for_function(f"window.__polls >= {target}", timeout=20000)


def open_attempts(page, run: JobRun, first_text: str):
    page.locator(f"#run-{run.id}").get_by_role("link", name="Attempts").click()
    attempts = page.locator(f"#attempts-{run.id}")
    attempts.get_by_text(first_text).first.wait_for()
    return attempts


@pytest.mark.parametrize("where", ["runs", "job"])
def test_an_open_attempts_row_stays_open_through_polls_and_shows_new_attempts(page, owner, where):
    _, job = owner
    run = make_run(job, status=RunStatus.RETRYING, attempts=1, status_code=500, error="HTTP 500")  # excerpt "boom"
    path, container = ("/runs/", "run-rows") if where == "runs" else (f"/jobs/{job.id}/", "job-runs")
    page.goto(path)
    assert page.get_by_text("refreshing every 2 s").is_visible() or where == "job"
    page.evaluate(COUNT_POLLS, container)
    attempts = open_attempts(page, run, "boom")
    # The user also unfolds the headers of attempt 1: a poll with nothing new keeps even that.
    attempts.locator("details summary").first.click()
    wait_for_polls(page, 2)
    assert attempts.is_visible()
    assert attempts.locator("details").first.evaluate("d => d.open")

    add_attempt(run, status_code=502, excerpt="bad gateway")  # poll 1 that changes data
    page.locator(f"#run-{run.id}[data-attempts='2']").wait_for(timeout=20000)
    attempts.get_by_text("bad gateway").wait_for()  # still open, with the new attempt in it
    assert attempts.is_visible()

    add_attempt(run, status_code=200, excerpt="finally ok", final=RunStatus.SUCCEEDED)  # poll 2
    page.locator(f"#run-{run.id}[data-status=succeeded]").wait_for(timeout=20000)
    attempts.get_by_text("finally ok").wait_for()
    assert attempts.is_visible()
    assert attempts.locator("table.attempt-table tbody tr").count() == 3
    wait_for_polls(page, 1)
    assert attempts.is_visible()
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"

    # Folding is the user's call, and stays folded through the next polls.
    attempts.get_by_role("button", name="Hide attempts").click()
    page.locator(f"#attempts-{run.id}[hidden]").wait_for(state="attached")
    wait_for_polls(page, 1)
    assert page.locator(f"#attempts-{run.id}[hidden]").count() == 1


def test_dead_letters_keep_open_rows_and_ticked_boxes_through_polls(page, owner):
    _, job = owner
    run = make_run(job, status=RunStatus.FAILED, attempts=2, status_code=500, error="HTTP 500")
    page.goto("/dead-letters/")
    page.evaluate(COUNT_POLLS, "run-rows")
    attempts = open_attempts(page, run, "boom")
    page.locator(f"#select-{run.id}").check()

    for minutes_ago in (3, 2):  # two polls that change data: each brings a new dead letter
        other = make_run(job, status=RunStatus.FAILED, attempts=1, status_code=503, error="HTTP 503",
                         minutes_ago=minutes_ago)  # fmt: skip
        page.locator(f"#run-{other.id}").wait_for(timeout=20000)
        assert attempts.is_visible()
        assert attempts.get_by_text("boom").first.is_visible()
        assert page.locator(f"#select-{run.id}").is_checked()
        assert not page.locator(f"#select-{other.id}").is_checked()
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"
