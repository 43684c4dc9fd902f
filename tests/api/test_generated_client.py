"""A client generated from the served OpenAPI schema (openapi-python-client) drives the API.

What an API user does: fetch /api/v1/schema from a running Chime (uvicorn, production settings),
generate a Python client from it, and use it. Every response must parse into the generated models
(a field the schema declares non-null that the server sends as null crashes the generated parser),
every status must be one the schema lists, and a model built the way the generated code invites
(`PatchedJob...(name="x")`) must do what it says. docs/api.md#generated-clients.

Deliveries are real: a Celery worker and the scheduler deliver to a receiver on 127.0.0.1 that
answers 500 (the failed run that is then replayed) and then 200. The worker is started only for
the test that needs it.

This is what found issue #11's contract bugs: with a schema that declares Run.finished_at and
status_reason non-null, the generated client crashes on every unfinished run (trigger, replay);
with schema defaults on the PATCH model, `PatchedJob...(name="x")` also sends priority, timeout,
misfire policy and `enabled: true`, resetting them and resuming a paused job.
"""

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from apps.tenants.services import api_key_create
from tests.support.openapi_client import CheckedClient, body_model, generate, imported
from tests.support.processes import start_scheduler, start_worker, wait_until
from tests.support.receiver import Reply
from tests.support.web import PROXY_HEADERS, start_web

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

CRON = {"type": "cron", "expression": "0 0 1 1 *", "timezone": "UTC"}  # yearly: nothing fires during a test


@pytest.fixture(scope="module")
def web(django_db_setup):
    """One web process for the module, on the test database: the tests are transactional, so the
    rows each one commits (its tenant, its key) are what the process reads, and are flushed after."""
    server = start_web()
    try:
        yield server.wait_ready()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def generated(web, tmp_path_factory):
    """The client package generated from the schema the live server serves."""
    answer = httpx.get(f"{web.url}/api/v1/schema", params={"format": "json"}, headers=PROXY_HEADERS, timeout=30)
    assert answer.status_code == 200, answer.text[:500]
    with imported(generate(answer.content, tmp_path_factory.mktemp("generated-client"))) as package:
        yield package


@pytest.fixture
def key(tenant):
    return api_key_create(tenant=tenant, name="generated-client")


@pytest.fixture
def chime(generated, web, key) -> CheckedClient:
    return CheckedClient(generated, web.url, key.raw_key, PROXY_HEADERS)


@pytest.fixture
def delivering(transactional_db, redis_required):
    """A worker and the scheduler, stopped before the test's rows are flushed."""
    processes = [start_worker(concurrency=1), start_scheduler()]
    yield
    for process in processes:
        process.stop()


def create_job(chime: CheckedClient, **fields):
    """POST /jobs with a body of the generated create model (from_dict builds its nested models,
    whatever the schema calls them)."""
    body = body_model(chime.endpoint("jobs.jobs_create")).from_dict({"schedule": CRON, **fields})
    return chime.call("jobs.jobs_create", 201, body=body)


def test_create_list_with_pagination_patch_one_field_pause_resume_and_keys(chime, receiver, key):
    paused = create_job(
        chime,
        name="nightly",
        target={"url": f"{receiver.url}/nightly"},
        priority="high",
        timeout_seconds=7,
        misfire_policy="skip",
        catch_up_limit=3,
        enabled=False,
    )
    assert (paused.status.value, paused.enabled, paused.priority.value) == ("paused", False, "high")
    others = [create_job(chime, name=f"other-{i}", target={"url": f"{receiver.url}/other"}) for i in range(2)]

    # List two per page and follow `next` the way a client of the generated code can: its cursor
    # (and limit) are the list operation's parameters.
    first = chime.call("jobs.jobs_list", 200, limit=2)
    assert len(first.results) == 2 and first.next_, first.to_dict()
    link = urlsplit(first.next_)
    query = {name: values[0] for name, values in parse_qs(link.query).items()}
    assert link.path == "/api/v1/jobs" and set(query) <= {"cursor", "limit"}, first.next_
    second = chime.call("jobs.jobs_list", 200, cursor=query["cursor"], limit=int(query.get("limit", 2)))
    assert len(second.results) == 1 and second.next_ is None, second.to_dict()
    listed = [job.id for job in first.results + second.results]
    assert listed == [job.id for job in reversed([paused, *others])]  # newest first, each once

    # PATCH of one field, with the generated PATCH model built as its signature invites.
    before = chime.call("jobs.jobs_retrieve", 200, id=paused.id).to_dict()
    patch = body_model(chime.endpoint("jobs.jobs_partial_update"))(name="nightly-renamed")
    renamed = chime.call("jobs.jobs_partial_update", 200, id=paused.id, body=patch)
    sent = chime.sent_json()
    after = chime.call("jobs.jobs_retrieve", 200, id=paused.id).to_dict()
    assert renamed.name == after["name"] == "nightly-renamed"
    kept = set(before) - {"name", "updated_at"}
    changed = {name: (before[name], after.get(name)) for name in sorted(kept) if before[name] != after.get(name)}
    assert not changed, f"a PATCH of `name` alone changed {changed}: the generated PATCH model sent {sent}"
    assert sent == {"name": "nightly-renamed"}, f"the generated PATCH model sends fields nobody set: {sent}"

    # Bad input is refused with a field-level error that parses into the generated Error model.
    bad = body_model(chime.endpoint("jobs.jobs_partial_update"))(timeout_seconds=0)
    refusal = chime.refused("jobs.jobs_partial_update", 400, id=paused.id, body=bad)
    assert refusal.code == "invalid" and "timeout_seconds" in refusal.fields.additional_properties, refusal

    # Pause and resume (a job that is active).
    other = others[0]
    stopped = chime.call("jobs.jobs_pause_create", 200, id=other.id)
    assert (stopped.status.value, stopped.enabled) == ("paused", False)
    resumed = chime.call("jobs.jobs_resume_create", 200, id=other.id)
    assert (resumed.status.value, resumed.enabled) == ("active", True)
    assert resumed.next_fire_at is not None

    # API keys: the key in use is listed, by its prefix, without any secret.
    keys = chime.call("api_keys.api_keys_list", 200)
    assert hasattr(keys, "results"), f"GET /api-keys must answer a page like every list, not {type(keys)}"
    assert [(k.id, k.prefix) for k in keys.results] == [(str(key.api_key.id), key.api_key.prefix)]
    assert keys.next_ is None
    assert key.raw_key not in chime.last_response.text


def wait_for_run(chime: CheckedClient, run_id: str, status: str):
    """GET /runs/{id} until the run has `status`; every answer on the way (queued, running, ...)
    must parse too."""

    def reached():
        run = chime.call("runs.runs_retrieve", 200, id=run_id)
        return run if run.status.value == status else None

    return wait_until(reached, timeout=60, interval=0.3, message=f"run {run_id} is {status}")


def test_trigger_get_run_and_replay_a_failed_run(chime, receiver, delivering):
    receiver.respond = lambda delivery: Reply(status=500, body=b"down for maintenance")
    job = create_job(
        chime,
        name="flaky",
        target={"url": f"{receiver.url}/flaky"},
        retry={"max_attempts": 1, "initial_backoff_seconds": 10, "max_backoff_seconds": 60},
    )

    run = chime.call("jobs.jobs_trigger_create", 201, id=job.id)  # not finished: finished_at is null
    assert (run.job_id, run.trigger.value, run.finished_at) == (job.id, "manual", None)
    got = chime.call("runs.runs_retrieve", 200, id=run.id)
    assert (got.id, got.job_id) == (run.id, job.id)

    failed = wait_for_run(chime, run.id, "failed")
    assert [(a.number, a.status_code) for a in failed.attempts] == [(1, 500)]
    assert failed.finished_at is not None

    receiver.respond = lambda delivery: Reply(status=200)
    replayed = chime.call("runs.runs_replay_create", 202, id=run.id)
    assert (replayed.id, replayed.finished_at) == (run.id, None)
    succeeded = wait_for_run(chime, run.id, "succeeded")
    assert [(a.number, a.status_code) for a in succeeded.attempts] == [(1, 500), (2, 200)]
    assert succeeded.finished_at is not None
    deliveries = receiver.received(lambda d: d.path == "/flaky")
    assert [d.webhook_id for d in deliveries] == [run.id, run.id] and all(d.signature_ok for d in deliveries)
