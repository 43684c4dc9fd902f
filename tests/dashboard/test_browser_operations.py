"""A bulk replay started from the dead-letters page's filter, watched in Debian Chromium: the
operation page's progress bar moves while the real ops worker (Celery on Redis) replays 1,000
dead letters in chunks, and reaches 100 % without a reload."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.jobs.models import JobRun, RunStatus
from apps.jobs.services import job_create
from apps.tenants.models import Membership, Role
from apps.tenants.services import tenant_create
from tests.operations.support import dead_letters
from tests.support.processes import start_worker

from .browser import PASSWORD, chromium, free_port, require_chromium, screenshot, start_web

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]

# 20 chunks ~0.2 s apart: a few seconds of progress for the 1 s polls to show.
OPS = {"CHIME_OPERATION_CHUNK_SIZE": "50", "CHIME_OPERATION_CHUNK_PAUSE_SECONDS": "0.2"}
# Every percentage the page showed, recorded by a MutationObserver (the fragment is swapped whole).
WATCH_PERCENT = """() => {
  window.__percents = [];
  window.__noReload = true;
  const record = () => {
    const shown = document.querySelector('[data-percent]');
    const text = shown && shown.textContent.trim();
    if (text && window.__percents[window.__percents.length - 1] !== text) window.__percents.push(text);
  };
  record();
  new MutationObserver(record).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker):
    from django.conf import settings

    from tests.conftest import _require

    require_chromium()
    _require("Redis", settings.REDIS_URL, 6379)
    port = free_port()
    process = start_web(port)
    yield f"http://127.0.0.1:{port}"
    process.stop()


@pytest.fixture
def ops_worker(web, redis_required):
    process = start_worker(name="ops", queues="ops", concurrency=1, **OPS)
    yield process
    process.stop()


@pytest.fixture
def page(web, request):
    with chromium() as browser:
        context = browser.new_context(base_url=web, viewport={"width": 1280, "height": 900}, timezone_id="UTC")
        context.set_default_timeout(15000)
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm: the user says yes
        yield page
        screenshot(page, request.node.name)
        context.close()


def test_the_progress_bar_of_a_bulk_replay_reaches_100_percent(page, web, ops_worker):
    tenant = tenant_create(slug="acme", name="Acme")
    user = get_user_model().objects.create_user(username="ops@acme.test", email="ops@acme.test", password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant, role=Role.OWNER)
    job = job_create(tenant=tenant, name="flaky-sync", schedule_type="cron", cron_expression="0 * * * *",
                     timezone="UTC", target_url="https://example.com/hook")  # fmt: skip
    unavailable = dead_letters(job, 1000, status_code=503)
    not_found = dead_letters(job, 5, status_code=404)
    client = Client()
    client.force_login(user)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": web}])

    page.goto("/dead-letters/")
    page.get_by_label("HTTP status").fill("503")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/dead-letters/?*status_code=503*")
    page.get_by_role("button", name="Replay all matching this filter…").click()
    page.wait_for_url("**/operations/*/")
    page.evaluate(WATCH_PERCENT)
    page.locator("[data-state]", has_text="succeeded").wait_for(timeout=90000)

    percents = page.evaluate("window.__percents")
    assert page.locator("[data-percent]").inner_text() == "100 %"
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"
    between = [p for p in percents if p not in ("0 %", "100 %")]
    assert between, f"the bar jumped straight to the end: {percents}"
    assert page.get_by_role("status").inner_text() == "Result: 1000 replayed."
    assert JobRun.objects.filter(id__in=unavailable, status=RunStatus.SCHEDULED).count() == 1000
    assert JobRun.objects.filter(id__in=not_found, status=RunStatus.FAILED).count() == 5  # outside the filter
