"""Acceptance of issue 6 in a real browser against the real stack (web, scheduler, worker, receiver):
sign up; create a cron job through the form with its preview; trigger it and watch its row turn
`succeeded` without a reload; a failing job lands in the dead letters and is replayed from the
dashboard and from the admin; a revoked API key is refused by the API. Screenshots go to
test-output/screenshots/."""

import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.jobs.models import JobDefinition, JobRun, RunStatus
from apps.jobs.services import job_create
from apps.tenants.models import Membership, Role
from apps.tenants.services import tenant_create
from tests.support.processes import start_scheduler, start_worker, wait_until
from tests.support.receiver import Receiver, Reply

from .browser import (
    FAST,
    PASSWORD,
    WATCH_STATUSES,
    api_status,
    chromium,
    free_port,
    require_chromium,
    screenshot,
    start_web,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker):
    """uvicorn serving config.asgi on the test database, shared by this module's tests."""
    from django.conf import settings

    from tests.conftest import _require

    require_chromium()
    _require("Redis", settings.REDIS_URL, 6379)
    port = free_port()
    process = start_web(port)
    yield f"http://127.0.0.1:{port}"
    process.stop()


@pytest.fixture
def stack(web):
    """The web server plus a scheduler and a worker of the test's own. They are stopped before the
    test's database flush: a TRUNCATE racing a worker's claim query can deadlock in PostgreSQL."""
    processes = [start_worker(queues="runs.high,runs.default,runs.low", **FAST), start_scheduler(**FAST)]
    yield web
    for process in processes:
        process.stop()


@pytest.fixture(scope="module")
def browser(web):
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(browser, web, request):
    context = browser.new_context(base_url=web, viewport={"width": 1280, "height": 900}, timezone_id="Europe/Berlin")
    context.set_default_timeout(15000)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm: the user says yes
    yield page
    screenshot(page, request.node.name)
    context.close()


@pytest.fixture
def receiver():
    server = Receiver().start()
    yield server
    server.stop()


def owner_of(slug: str, email: str):
    tenant = tenant_create(slug=slug, name=slug.title())
    user = get_user_model().objects.create_user(username=email, email=email, password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=Role.OWNER)
    return tenant, user


def log_in(page, user, stack):
    """The session of a logged-in Django test client, handed to the browser."""
    client = Client()
    client.force_login(user)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": stack}])


def keep_page_marker(page):
    page.evaluate("window.__noReload = true")


def assert_not_reloaded(page):
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"


def test_sign_up_and_create_a_cron_job_with_the_preview(page, web, receiver):
    page.goto("/signup/")
    page.get_by_label("Email").fill("ada@example.com")
    page.get_by_label("Password").fill("a-long-passphrase-42")
    page.get_by_label("Organization name").fill("Acme Robotics")
    page.get_by_role("button", name="Sign up").click()
    page.wait_for_url(f"{web}/")
    assert page.get_by_role("heading", name="Overview").is_visible()
    assert Membership.objects.get(user__username="ada@example.com").role == Role.OWNER

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="New job").click()
    page.get_by_label("Name").fill("nightly-report")
    expression = page.get_by_label("Cron expression")
    expression.press_sequentially("61 2 * * *", delay=20)
    page.locator("#schedule-preview [role=alert]").filter(has_text="out of range").wait_for()
    expression.fill("")
    expression.press_sequentially("30 2 * * *", delay=20)
    zone = page.get_by_label("Time zone")
    zone.fill("")
    zone.press_sequentially("Europe/Berlin", delay=10)
    times = page.locator("#schedule-preview ol.fire-times li")
    page.wait_for_function("document.querySelectorAll('#schedule-preview li').length === 5")
    assert "CE" in times.first.inner_text()  # CET or CEST: Berlin's wall clock
    screenshot(page, "job-form-preview")
    page.get_by_label("Webhook URL").fill(f"{receiver.url}/nightly")
    page.get_by_role("button", name="Create job").click()
    page.get_by_role("heading", name="nightly-report").wait_for()
    job = JobDefinition.objects.get(name="nightly-report")
    assert (job.cron_expression, job.timezone) == ("30 2 * * *", "Europe/Berlin")
    assert page.get_by_text("at 02:30 every day, Europe/Berlin").is_visible()

    # The jobs list filters as you type (HTMX), without a reload.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    keep_page_marker(page)
    page.get_by_label("Search").press_sequentially("zzz", delay=20)
    page.get_by_text("No job matches.").wait_for()
    page.get_by_label("Search").fill("")
    page.get_by_label("Search").press_sequentially("nightly", delay=20)
    page.get_by_role("link", name="nightly-report").wait_for()
    assert "q=nightly" in page.url
    assert_not_reloaded(page)


def test_trigger_a_job_and_watch_its_row_turn_succeeded_without_reloading(page, stack, receiver):
    tenant, user = owner_of("acme", "owner@acme.test")
    receiver.respond = lambda delivery: Reply(status=200, delay_seconds=0.5)
    job = job_create(tenant=tenant, name="hourly-sync", schedule_type="cron", cron_expression="0 * * * *",
                     timezone="UTC", target_url=f"{receiver.url}/sync")  # fmt: skip
    log_in(page, user, stack)

    # From the jobs list, by keyboard: Tab to the job's Trigger button and press Enter.
    page.goto("/jobs/")
    keep_page_marker(page)
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim().startsWith('Trigger')"):
            break
    page.keyboard.press("Enter")
    row = page.locator(f"#job-{job.id}")
    row.locator(".status-succeeded").wait_for()  # the last-run cell, pushed over the WebSocket
    assert_not_reloaded(page)

    # On the job's page: the new run appears on top and goes through its states live.
    page.goto(f"/jobs/{job.id}/")
    page.locator("[data-live-indicator][data-state=live]").wait_for()
    keep_page_marker(page)
    before = page.locator("tbody.run").count()  # the run triggered from the list above
    page.get_by_role("button", name="Trigger now").click()
    page.wait_for_function(f"document.querySelectorAll('tbody.run').length === {before + 1}")
    run_id = page.locator("tbody.run").first.get_attribute("id").removeprefix("run-")
    page.evaluate(WATCH_STATUSES, run_id)
    wait_until(
        lambda: JobRun.objects.filter(pk=run_id, status=RunStatus.SUCCEEDED).exists(), timeout=30, message="delivered"
    )
    started = time.monotonic()
    page.locator(f"#run-{run_id}[data-status=succeeded]").wait_for(timeout=5000)
    lag = time.monotonic() - started
    assert lag < 1.0, f"the row turned succeeded {lag:.2f} s after the database did"
    seen = page.evaluate("window.__statuses")
    assert seen[-1] == "succeeded" and "running" in seen, seen
    assert_not_reloaded(page)


def test_runs_page_shows_new_runs_live(page, stack, receiver):
    tenant, user = owner_of("acme", "owner@acme.test")
    job = job_create(tenant=tenant, name="every-minute", schedule_type="cron", cron_expression="* * * * *",
                     timezone="UTC", target_url=f"{receiver.url}/tick")  # fmt: skip
    log_in(page, user, stack)
    page.goto("/runs/")
    page.locator("[data-live-indicator][data-state=live]").wait_for()
    keep_page_marker(page)
    from apps.jobs.services import job_trigger

    run = job_trigger(job=job)  # as the API would: the dashboard learns it from the event
    page.locator(f"#run-{run.id}[data-status=succeeded]").wait_for(timeout=30000)
    assert_not_reloaded(page)


def test_a_failing_job_lands_in_dead_letters_and_is_replayed_from_the_dashboard(page, stack, receiver):
    tenant, user = owner_of("acme", "owner@acme.test")
    receiver.respond = lambda delivery: Reply(status=500, body=b"database is down")
    job = job_create(tenant=tenant, name="fragile", schedule_type="cron", cron_expression="0 * * * *",
                     timezone="UTC", target_url=f"{receiver.url}/fragile", retry_max_attempts=1)  # fmt: skip
    log_in(page, user, stack)
    page.goto("/dead-letters/")
    page.locator("[data-live-indicator][data-state=live]").wait_for()
    from apps.jobs.services import job_trigger

    run = job_trigger(job=job)
    row = page.locator(f"#run-{run.id}")
    row.locator(".status-failed").wait_for(timeout=30000)  # appears live, as it fails
    row.get_by_role("link", name="Attempts").click()
    attempts = page.locator(f"#attempts-{run.id}")
    attempts.get_by_text("database is down").wait_for()
    assert "500" in attempts.inner_text()
    screenshot(page, "dead-letters")

    receiver.respond = lambda delivery: Reply(status=200, delay_seconds=0.7)
    keep_page_marker(page)
    page.evaluate(WATCH_STATUSES, str(run.id))
    row.get_by_role("checkbox").check()
    page.get_by_role("button", name="Replay selected…").click()  # confirmed in the dialog
    page.locator("#flash").get_by_text("Replayed 1 run.").wait_for()
    page.locator(f"#run-{run.id}[data-status=succeeded]").wait_for(timeout=30000)
    seen = page.evaluate("window.__statuses")
    assert seen[0] == "failed" and seen[-1] == "succeeded" and "running" in seen, seen
    assert_not_reloaded(page)
    assert len(receiver.received(lambda d: d.webhook_id == str(run.id))) == 2  # same webhook-id both times


def test_dead_letters_are_replayed_from_the_admin(page, stack, receiver):
    tenant, _ = owner_of("acme", "owner@acme.test")
    receiver.respond = lambda delivery: Reply(status=503)
    job = job_create(tenant=tenant, name="flaky", schedule_type="cron", cron_expression="0 * * * *",
                     timezone="UTC", target_url=f"{receiver.url}/flaky", retry_max_attempts=1)  # fmt: skip
    from apps.jobs.services import job_trigger

    first, second = job_trigger(job=job), job_trigger(job=job)
    wait_until(
        lambda: JobRun.objects.filter(definition=job, status=RunStatus.FAILED).count() == 2, timeout=30, message="dead"
    )
    receiver.respond = lambda delivery: Reply(status=200)
    get_user_model().objects.create_superuser("staff", "staff@chime.test", PASSWORD)
    page.goto("/admin/login/")
    page.get_by_label("Username").fill("staff")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    # The "Replay" button on a failed run's page.
    page.goto(f"/admin/jobs/jobrun/{first.id}/change/")
    page.get_by_role("button", name="Replay").click()
    page.get_by_text("Replayed: the run is scheduled again.").wait_for()
    screenshot(page, "admin-run")
    # The action on the list, filtered to failed runs.
    page.goto(f"/admin/jobs/jobrun/?status__exact=failed&tenant__id__exact={tenant.id}")
    page.locator(f"input[name=_selected_action][value='{second.id}']").check()
    page.locator("select[name=action]").select_option("replay_dead_letters")
    page.locator("button[name=index]").click()  # "Go"
    page.get_by_text("Replayed 1 run(s).").wait_for()
    wait_until(
        lambda: JobRun.objects.filter(definition=job, status=RunStatus.SUCCEEDED).count() == 2,
        timeout=30,
        message="both replays delivered",
    )


def test_revoke_an_api_key_and_the_api_refuses_it(page, web):
    _, user = owner_of("acme", "owner@acme.test")
    log_in(page, user, web)
    page.goto("/keys/")
    page.get_by_label("Name").fill("deploy bot")
    page.get_by_role("button", name="Create key").click()
    raw_key = page.locator("#new-key").input_value()
    assert raw_key.startswith("chime_")
    assert api_status(web, raw_key) == 200
    screenshot(page, "api-keys")
    page.reload()
    assert raw_key not in page.content()  # shown once
    page.get_by_role("button", name="Revoke").click()  # confirmed in the dialog
    page.get_by_text("revoked").first.wait_for()
    assert api_status(web, raw_key) == 401


def test_pages_read_without_javascript_and_at_phone_width(browser, web, receiver):
    tenant, user = owner_of("acme", "owner@acme.test")
    job = job_create(tenant=tenant, name="nightly-report", schedule_type="cron", cron_expression="0 2 * * *",
                     timezone="Europe/Berlin", target_url=f"{receiver.url}/x")  # fmt: skip
    context = browser.new_context(
        base_url=web, java_script_enabled=False, viewport={"width": 390, "height": 844}, is_mobile=True
    )
    page = context.new_page()
    log_in(page, user, web)
    page.goto("/jobs/")
    assert page.get_by_text("at 02:00 every day, Europe/Berlin").is_visible()
    # Pause works as a plain form POST, back to the same page.
    page.get_by_role("button", name="Pause nightly-report").click()
    page.get_by_text("Paused.").wait_for()
    job.refresh_from_db()
    assert job.status == "paused"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide on a 390 px screen"
    screenshot(page, "phone-jobs")
    context.close()
