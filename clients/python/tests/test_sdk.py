"""The sync and async clients against a live Chime: every operation, pagination, errors with
their field messages, idempotency keys, and retries on 429 honouring Retry-After."""

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import pytest

from chime_client import AsyncClient, Client, ConflictError, NotFoundError, ValidationError
from chime_client.errors import AuthenticationError, RateLimitedError
from tests.support.receiver import Receiver, Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]

YEARLY = {"type": "cron", "expression": "0 0 1 1 *", "timezone": "UTC"}  # nothing fires during a test
TARGET = {"url": "http://127.0.0.1:9/hook"}


def make(chime, name, **fields):
    return chime.jobs.create(name=name, schedule=YEARLY, target=TARGET, **fields)


def test_jobs_create_list_get_update_pause_resume_delete(chime):
    created = [make(chime, f"job-{i}", priority="high" if i == 0 else "default") for i in range(3)]
    listed = list(chime.jobs.list(limit=2))  # two pages, followed through `next`
    assert [job["id"] for job in listed] == [job["id"] for job in reversed(created)]
    assert [job["name"] for job in chime.jobs.list(priority="high")] == ["job-0"]
    first = created[0]["id"]
    assert chime.jobs.get(first)["recent_runs"] == []
    renamed = chime.jobs.update(first, name="renamed")
    assert (renamed["name"], renamed["priority"]) == ("renamed", "high")  # only what was sent changed
    assert chime.jobs.pause(first)["status"] == "paused"
    assert chime.jobs.resume(first)["status"] == "active"
    assert chime.jobs.delete(first) is None
    assert [job["name"] for job in chime.jobs.list(q="renamed")] == []


def test_errors_carry_the_apis_code_and_field_messages(chime, web):
    with pytest.raises(ValidationError) as invalid:
        chime.jobs.create(name="bad", schedule={"type": "cron", "expression": "61 * * * *"}, target=TARGET)
    assert invalid.value.status == 400 and invalid.value.code == "invalid"
    assert "schedule.expression" in invalid.value.fields
    with pytest.raises(NotFoundError) as missing:
        chime.runs.get("00000000-0000-0000-0000-000000000000")
    assert missing.value.code == "not_found"
    with pytest.raises(AuthenticationError), Client(web.url, "chime_wrong_key") as stranger:
        stranger.signing_secret.get()


def test_an_idempotency_key_returns_the_first_job(chime):
    first = make(chime, "once-only", idempotency_key="create-once")
    again = make(chime, "once-only", idempotency_key="create-once")
    assert again["id"] == first["id"]
    assert len(list(chime.jobs.list())) == 1
    with pytest.raises(ConflictError):
        make(chime, "another body", idempotency_key="create-once")


def test_create_many_is_all_or_none_with_each_bad_items_fields(chime):
    jobs = [{"name": f"bulk-{i}", "schedule": YEARLY, "target": TARGET} for i in range(3)]
    created = chime.jobs.create_many(jobs)["jobs"]
    assert [job["name"] for job in created] == ["bulk-0", "bulk-1", "bulk-2"]
    bad = [*jobs, {"name": "bad", "schedule": {"type": "cron", "expression": "61 * * * *"}, "target": TARGET}]
    with pytest.raises(ValidationError) as invalid:
        chime.jobs.create_many([{**job, "name": f"second-{i}"} for i, job in enumerate(bad)])
    assert "jobs.3.schedule.expression" in invalid.value.fields
    assert len(list(chime.jobs.list())) == 3, "nothing of the refused batch was created"


def test_trigger_runs_cancel_backfill_and_replay_refusal(chime):
    job = make(chime, "manual")
    run = chime.jobs.trigger(job["id"])
    assert run["trigger"] == "manual" and run["job_id"] == job["id"]
    assert [r["id"] for r in chime.runs.list(job=job["id"])] == [run["id"]]
    assert [r["id"] for r in chime.jobs.runs(job["id"])] == [run["id"]]
    assert chime.runs.cancel(run["id"])["status"] == "cancelled"
    assert chime.runs.get(run["id"])["status"] == "cancelled"
    with pytest.raises(ConflictError):
        chime.runs.replay(run["id"])  # only a failed run can be replayed
    assert chime.runs.replay_many(job=job["id"]) == {"replayed": 0}
    end = datetime(2026, 1, 1, 0, 0, tzinfo=UTC) + timedelta(seconds=1)
    backfilled = chime.jobs.backfill(job["id"], start=end - timedelta(days=365), end=end)
    assert (backfilled["created"], backfilled["existing"]) == (1, 0)
    with pytest.raises(ValueError, match="timezone-aware"):
        chime.jobs.backfill(job["id"], start=datetime(2025, 1, 1), end=end)


def test_keys_secret_preview_and_stats(chime):
    created = chime.api_keys.create("ci")
    assert created["key"].startswith("chime_")
    assert created["id"] in [key["id"] for key in chime.api_keys.list()]
    assert chime.api_keys.revoke(created["id"]) is None
    assert next(k for k in chime.api_keys.list() if k["id"] == created["id"])["revoked_at"]
    secret = chime.signing_secret.get()["secret"]
    rotated = chime.signing_secret.rotate()["secret"]
    assert rotated.startswith("whsec_") and rotated != secret
    preview = chime.schedules.preview("30 2 * * *", timezone="Europe/Berlin", count=3, start="2026-03-28T00:00:00Z")
    assert [t["dst"] for t in preview["fire_times"]] == [None, "gap", None]
    assert chime.stats.get(window="day")["window"] == "day"


def test_the_async_client_does_the_same(web, api_key):
    async def scenario():
        async with AsyncClient(web.url, api_key) as chime:
            jobs = [await chime.jobs.create(name=f"a-{i}", schedule=YEARLY, target=TARGET) for i in range(3)]
            listed = [job["id"] async for job in chime.jobs.list(limit=2)]
            assert listed == [job["id"] for job in reversed(jobs)]
            run = await chime.jobs.trigger(jobs[0]["id"])
            assert (await chime.runs.get(run["id"]))["id"] == run["id"]
            with pytest.raises(NotFoundError):
                await chime.jobs.get("00000000-0000-0000-0000-000000000000")

    asyncio.run(scenario())


def test_429_and_503_are_retried_after_retry_after_then_given_up():
    """A real HTTP server that throttles: the client waits as told and tries again, boundedly."""
    server = Receiver().start()
    answers = iter([Reply(429, headers={"Retry-After": "1"}), Reply(503), Reply(200, body=b'{"secret": "s"}')])
    lock = threading.Lock()

    def respond(delivery):
        with lock:
            return next(answers, Reply(429, headers={"Retry-After": "0"}))

    server.respond = respond
    try:
        with Client(server.url, "chime_x", max_retries=3, max_retry_wait_seconds=2) as chime:
            assert chime.signing_secret.get() == {"secret": "s"}  # 429, 503 (GET: safe), then 200
            assert len(server.received()) == 3
            with pytest.raises(RateLimitedError) as throttled:
                chime.signing_secret.get()  # 429 every time: 1 + 3 retries, then the error
            assert len(server.received()) == 3 + 4
            assert throttled.value.retry_after_seconds == 0
            server.respond = lambda delivery: Reply(503)
            with pytest.raises(Exception, match="503"):
                chime.jobs.trigger("some-id")  # a POST without an Idempotency-Key: not repeated
            assert len(server.received()) == 3 + 4 + 1
    finally:
        server.stop()


def test_the_async_client_retries_a_429_too():
    server = Receiver().start()
    answers = iter([Reply(429, headers={"Retry-After": "1"})])
    server.respond = lambda delivery: next(answers, Reply(200, body=b'{"replayed": 0}'))
    try:

        async def scenario():
            async with AsyncClient(server.url, "chime_x", max_retry_wait_seconds=2) as chime:
                return await chime.runs.replay_many(status="failed")  # a POST: a 429 did nothing, retried

        assert asyncio.run(scenario()) == {"replayed": 0}
        assert len(server.received()) == 2
    finally:
        server.stop()


def test_retry_waits_follow_retry_after_within_the_cap():
    from email.utils import format_datetime

    import httpx

    from chime_client._http import Call, RetryPolicy, retry_after_seconds

    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    assert 18 <= retry_after_seconds(soon) <= 20
    assert retry_after_seconds("7") == 7 and retry_after_seconds("junk") is None
    policy = RetryPolicy(max_retries=2, max_retry_wait_seconds=5)
    told = httpx.Response(429, headers={"Retry-After": "60"})
    assert policy.wait(0, told) == 5  # capped
    assert 0 <= policy.wait(3, httpx.Response(503)) <= 5  # jittered backoff, capped
    post = Call("POST", "/jobs/x/trigger")
    assert policy.should_retry(post, 0, told) and not policy.should_retry(post, 2, told)
    assert not policy.should_retry(post, 0, httpx.Response(503))
    assert policy.should_retry(Call("POST", "/jobs", headers={"Idempotency-Key": "k"}), 0, httpx.Response(503))
    assert not policy.should_retry(Call("GET", "/jobs"), 0, httpx.Response(500))  # a bug is not retried
