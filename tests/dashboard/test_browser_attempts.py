"""Opening a run's attempts while its row is rendered again by a live update (CI caught it).

A live update replaces the run's whole <tbody>. htmx resolves a request's target when the request
leaves, so the attempts asked for just before that update were swapped into the detached old row,
and the user's click was lost: the row stayed folded. In the dead-letters walk of test_browser.py
the "failed" event can arrive twice (the claim's and the outcome's events, each rendered from the
database), so a click between the two renders did exactly that. Here the attempts request is held
by the browser until the row has been rendered again, which makes the race certain."""

import pytest

from apps.core.events import runs_changed
from apps.jobs.models import JobRun

from .conftest import make_run
from .test_browser import browser, log_in, owner_of, page, web

__all__ = ["browser", "page", "web"]  # fixtures shared with test_browser.py

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("where", ["/runs/", "/dead-letters/"])
def test_attempts_asked_for_before_a_live_update_of_the_row_still_open(page, web, where):
    from apps.jobs.services import job_create

    tenant, user = owner_of("acme", "owner@acme.test")
    job = job_create(tenant=tenant, name="fragile", schedule_type="cron", cron_expression="0 * * * *",
                     timezone="UTC", target_url="https://example.com/hook")  # fmt: skip
    run = make_run(job, status="failed", attempts=1, status_code=500, error="HTTP 500: database is down")
    held = []

    def hold_the_first(route):
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route("**/attempts/**", hold_the_first)
    log_in(page, user, web)
    page.goto(where)
    page.locator("[data-live-indicator][data-state=live]").wait_for()
    row = page.locator(f"#run-{run.id}")
    row.get_by_role("link", name="Attempts").click()
    _wait(page, lambda: held)  # the request is out, its answer held
    page.evaluate(f"window.__oldRow = document.getElementById('run-{run.id}')")

    JobRun.objects.filter(id=run.id).update(status_reason="Attempt 1 failed: HTTP 500; seen again")
    runs_changed([(tenant.id, run.id)])
    page.wait_for_function(f"document.getElementById('run-{run.id}') !== window.__oldRow")
    held[0].continue_()

    attempts = page.locator(f"#attempts-{run.id}")
    attempts.get_by_text("database is down").wait_for()
    assert "500" in attempts.inner_text()


def _wait(page, condition, timeout_ms=10000):
    waited = 0
    while not condition():
        assert waited < timeout_ms, "the attempts request never left the browser"
        page.wait_for_timeout(50)  # lets Playwright dispatch the route handler
        waited += 50
