"""Tenant quotas (apps/tenants/quotas.py, docs/api.md#limits-and-quotas): every limit, its default
from settings, its override in TenantLimits, and the refusal the API and the dashboard give.
Real PostgreSQL and Redis; another tenant is never touched by the first one's limits."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection

from apps.jobs.models import JobDefinition, JobRun, JobStatus
from apps.tenants import quotas
from apps.tenants.models import ApiKey, Role, TenantLimits
from apps.tenants.ratelimit import Rate, reset_local
from apps.tenants.services import api_key_create
from tests.dashboard.conftest import logged_in, make_user

JOB = {
    "name": "hourly",
    "schedule": {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"},
    "target": {"url": "https://example.com/hook"},
}


@pytest.fixture(autouse=True)
def clean_limits():
    """Counts live in Redis across tests: start each test with none."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter("chime:limit:*"):
        client.delete(key)
    reset_local()


def create_job(api, **overrides):
    return api.post("/api/v1/jobs", {**JOB, **overrides}, format="json")


def assert_refused(response, status: int, limit: str, value=None):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["limit"]["name"] == limit
    if value is not None:
        assert error["limit"]["value"] == value
    assert limit in error["message"]
    return error


# --- effective limits --------------------------------------------------------------------------


def test_effective_limits_are_the_settings_with_the_tenants_overrides(tenant, other_tenant, settings):
    settings.CHIME_QUOTA_MAX_JOBS = 7
    settings.CHIME_API_RATE_LIMIT = "100/min"
    TenantLimits.objects.create(tenant=tenant, max_jobs=3, api_rate_limit="10/15min")
    mine, theirs = quotas.effective_limits(tenant.pk), quotas.effective_limits(other_tenant.pk)
    assert (mine.max_jobs, mine.api_rate) == (3, Rate(count=10, seconds=900))
    assert (theirs.max_jobs, theirs.api_rate) == (7, Rate(count=100, seconds=60))
    assert mine.max_api_keys == settings.CHIME_QUOTA_MAX_API_KEYS  # blank: the default


def test_rates_parse_and_reject_nonsense():
    assert Rate.parse("1200/min") == Rate(1200, 60)
    assert Rate.parse("3/hour") == Rate(3, 3600)
    assert Rate.parse("10/15min") == Rate(10, 900)
    for bad in ("", "fast", "10/fortnight", "10/0min", "-1/min"):
        with pytest.raises(ValueError):
            Rate.parse(bad)


# --- active jobs -------------------------------------------------------------------------------


def test_jobs_over_the_limit_are_refused_with_403_and_deleting_one_frees_a_slot(api, other_api, settings):
    settings.CHIME_QUOTA_MAX_JOBS = 2
    first = create_job(api).json()
    create_job(api)
    error = assert_refused(create_job(api), 403, "max_jobs", 2)
    assert error["code"] == "quota_exceeded"
    assert create_job(other_api).status_code == 201, "another tenant has its own quota"
    api.post(f"/api/v1/jobs/{first['id']}/pause")
    assert_refused(create_job(api), 403, "max_jobs")  # a paused job still counts
    assert api.delete(f"/api/v1/jobs/{first['id']}").status_code == 204
    assert create_job(api).status_code == 201


def test_completed_jobs_do_not_count_until_they_are_scheduled_again(api, tenant, settings):
    settings.CHIME_QUOTA_MAX_JOBS = 1
    done = create_job(api).json()
    JobDefinition.objects.filter(pk=done["id"]).update(status=JobStatus.COMPLETED, next_fire_at=None)
    live = create_job(api)
    assert live.status_code == 201
    revive = api.patch(
        f"/api/v1/jobs/{done['id']}", {"schedule": {"type": "cron", "expression": "5 * * * *"}}, format="json"
    )
    assert_refused(revive, 403, "max_jobs", 1)
    assert JobDefinition.objects.get(pk=done["id"]).status == JobStatus.COMPLETED


def test_the_jobs_limit_is_overridden_per_tenant_in_the_admin(api, tenant, settings):
    settings.CHIME_QUOTA_MAX_JOBS = 1
    TenantLimits.objects.create(tenant=tenant, max_jobs=3)
    assert [create_job(api).status_code for _ in range(4)] == [201, 201, 201, 403]


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_cannot_take_more_than_the_limit(tenant, settings):
    """8 threads, each with its own PostgreSQL connection, create at once against a limit of 3."""
    from apps.jobs.services import job_create

    settings.CHIME_QUOTA_MAX_JOBS = 3
    barrier, outcomes = threading.Barrier(8), []

    def create(index):
        try:
            barrier.wait()
            job_create(
                tenant=tenant,
                name=f"job-{index}",
                schedule_type="cron",
                cron_expression="0 * * * *",
                target_url="https://example.com/hook",
            )
            outcomes.append("created")
        except quotas.QuotaExceeded:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) == ["created"] * 3 + ["refused"] * 5
    assert JobDefinition.objects.filter(tenant=tenant).count() == 3


def test_the_dashboard_shows_the_jobs_limit_on_the_form(tenant, settings):
    settings.CHIME_QUOTA_MAX_JOBS = 0
    client = logged_in(make_user("owner@acme.test", tenant, Role.OWNER))
    form = {
        "name": "nightly",
        "schedule_type": "cron",
        "cron_expression": "0 2 * * *",
        "timezone": "UTC",
        "target_url": "https://example.com/hook",
        "target_method": "POST",
        "priority": "default",
        "timeout_seconds": "30",
        "retry_max_attempts": "3",
        "retry_initial_backoff_seconds": "10",
        "retry_max_backoff_seconds": "600",
        "misfire_policy": "catch_up",
        "catch_up_limit": "100",
        "jitter_seconds": "0",
        "concurrency_policy": "allow",
        "failure_threshold": "10",
        "dst_gap": "shift",
        "dst_overlap": "first",
        "enabled": "on",
    }
    response = client.post("/jobs/new/", form)
    assert response.status_code == 200
    assert "max_jobs" in response.content.decode()
    assert not JobDefinition.objects.filter(tenant=tenant).exists()


# --- API keys ----------------------------------------------------------------------------------


def test_api_keys_over_the_limit_are_refused_and_revoking_frees_a_slot(api, other_api, tenant, settings):
    settings.CHIME_QUOTA_MAX_API_KEYS = 2  # the `api` fixture's key is the first
    second = api.post("/api/v1/api-keys", {"name": "ci"}, format="json")
    assert second.status_code == 201
    assert_refused(api.post("/api/v1/api-keys", {"name": "more"}, format="json"), 403, "max_api_keys", 2)
    assert ApiKey.objects.filter(tenant=tenant).count() == 2
    assert other_api.post("/api/v1/api-keys", {"name": "theirs"}, format="json").status_code == 201
    assert api.delete(f"/api/v1/api-keys/{second.json()['id']}").status_code == 204
    assert api.post("/api/v1/api-keys", {"name": "again"}, format="json").status_code == 201


def test_the_dashboard_refuses_a_key_over_the_limit(tenant, settings):
    api_key_create(tenant=tenant)
    settings.CHIME_QUOTA_MAX_API_KEYS = 1
    client = logged_in(make_user("owner@acme.test", tenant, Role.OWNER))
    response = client.post("/keys/new/", {"name": "one too many"})
    assert response.status_code == 403
    assert "max_api_keys" in response.content.decode()
    assert ApiKey.objects.filter(tenant=tenant).count() == 1


# --- backfill ----------------------------------------------------------------------------------


def test_a_backfill_over_the_limit_is_a_400_naming_the_limit_and_creates_nothing(api, tenant, settings):
    settings.CHIME_QUOTA_MAX_BACKFILL_RUNS = 24
    job = create_job(api).json()
    end = datetime.now(UTC).replace(minute=30, second=0, microsecond=0) - timedelta(hours=1)
    day = {"start": (end - timedelta(hours=24)).isoformat(), "end": end.isoformat()}
    more = {"start": (end - timedelta(hours=25)).isoformat(), "end": end.isoformat()}
    error = assert_refused(
        api.post(f"/api/v1/jobs/{job['id']}/backfill", more, format="json"), 400, "max_backfill_runs"
    )
    assert "end" in error["fields"]
    assert not JobRun.objects.filter(definition_id=job["id"]).exists()
    done = api.post(f"/api/v1/jobs/{job['id']}/backfill", day, format="json")
    assert done.status_code == 201 and done.json()["created"] == 24
    TenantLimits.objects.create(tenant=tenant, max_backfill_runs=5)
    assert_refused(api.post(f"/api/v1/jobs/{job['id']}/backfill", day, format="json"), 400, "max_backfill_runs", 5)


# --- manual triggers ---------------------------------------------------------------------------


def test_triggers_over_the_rate_are_429_with_retry_after_and_paused_jobs_count(api, other_api, settings):
    settings.CHIME_QUOTA_TRIGGERS_PER_MINUTE = 3
    active, paused = create_job(api).json(), create_job(api, enabled=False).json()
    assert api.post(f"/api/v1/jobs/{paused['id']}/trigger").status_code == 201  # allowed: someone asked
    assert [api.post(f"/api/v1/jobs/{active['id']}/trigger").status_code for _ in range(2)] == [201, 201]
    for job in (active, paused):
        refused = api.post(f"/api/v1/jobs/{job['id']}/trigger")
        assert_refused(refused, 429, "triggers_per_minute", "3")
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert JobRun.objects.filter(definition_id__in=[active["id"], paused["id"]]).count() == 3
    theirs = create_job(other_api).json()
    assert other_api.post(f"/api/v1/jobs/{theirs['id']}/trigger").status_code == 201


# --- retry policy ------------------------------------------------------------------------------


def test_retry_limits_are_400s_naming_the_field_and_the_limit(api, tenant, settings):
    settings.CHIME_QUOTA_MAX_RETRY_ATTEMPTS = 10
    settings.CHIME_QUOTA_MIN_RETRY_BACKOFF_SECONDS = 5
    many = create_job(api, retry={"max_attempts": 50, "initial_backoff_seconds": 10})
    error = assert_refused(many, 400, "max_retry_attempts", 10)
    assert list(error["fields"]) == ["retry.max_attempts"]
    fast = create_job(api, retry={"max_attempts": 3, "initial_backoff_seconds": 1})
    error = assert_refused(fast, 400, "min_retry_backoff_seconds", 5)
    assert list(error["fields"]) == ["retry.initial_backoff_seconds"]
    assert not JobDefinition.objects.filter(tenant=tenant).exists()
    job = create_job(api, retry={"max_attempts": 10, "initial_backoff_seconds": 5}).json()
    patch = api.patch(f"/api/v1/jobs/{job['id']}", {"retry": {"max_attempts": 11}}, format="json")
    assert_refused(patch, 400, "max_retry_attempts")
    TenantLimits.objects.create(tenant=tenant, max_retry_attempts=20, min_retry_backoff_seconds=1)
    assert create_job(api, retry={"max_attempts": 20, "initial_backoff_seconds": 1}).status_code == 201


def test_a_lowered_retry_limit_binds_a_job_when_its_retry_policy_changes_only(api, tenant, settings):
    settings.CHIME_QUOTA_MAX_RETRY_ATTEMPTS = 10
    job = create_job(api, retry={"max_attempts": 10, "initial_backoff_seconds": 10}).json()
    TenantLimits.objects.create(tenant=tenant, max_retry_attempts=3)
    assert api.patch(f"/api/v1/jobs/{job['id']}", {"name": "renamed"}, format="json").status_code == 200
    lowered = api.patch(f"/api/v1/jobs/{job['id']}", {"retry": {"max_attempts": 9}}, format="json")
    assert_refused(lowered, 400, "max_retry_attempts", 3)


def test_the_dashboard_refuses_triggers_over_the_rate_and_retry_limits_on_the_form(api, tenant, settings):
    settings.CHIME_QUOTA_TRIGGERS_PER_MINUTE = 1
    job = create_job(api).json()  # 5 attempts
    settings.CHIME_QUOTA_MAX_RETRY_ATTEMPTS = 8
    client = logged_in(make_user("owner@acme.test", tenant, Role.OWNER))
    client.post(f"/jobs/{job['id']}/trigger/")
    refused = client.post(f"/jobs/{job['id']}/trigger/", follow=True)
    assert "triggers_per_minute" in refused.content.decode()
    assert JobRun.objects.filter(definition_id=job["id"]).count() == 1
    edit = client.get(f"/jobs/{job['id']}/edit/").context["form"].initial
    form = {name: value for name, value in edit.items() if value is not None and value is not False}
    response = client.post(f"/jobs/{job['id']}/edit/", {**form, "retry_max_attempts": "9"})
    assert response.status_code == 200
    assert "max_retry_attempts" in " ".join(response.context["form"].errors["retry_max_attempts"])
    assert JobDefinition.objects.get(pk=job["id"]).retry_max_attempts == 5


# --- live dashboard connections ----------------------------------------------------------------


def _socket(session: str) -> WebsocketCommunicator:
    from config.asgi import application

    headers = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1"), (b"cookie", f"sessionid={session}".encode())]
    return WebsocketCommunicator(application, "/ws/live/?view=runs&since=0", headers=headers)


@pytest.mark.django_db(transaction=True)
def test_live_connections_are_capped_per_tenant_and_a_closed_one_frees_its_slot(tenant, other_tenant, settings):
    settings.CHIME_QUOTA_MAX_LIVE_CONNECTIONS = 2
    mine = logged_in(make_user("owner@acme.test", tenant)).cookies["sessionid"].value
    theirs = logged_in(make_user("owner@globex.test", other_tenant)).cookies["sessionid"].value

    async def scenario():
        first, second, third = _socket(mine), _socket(mine), _socket(mine)
        assert (await first.connect())[0] and (await second.connect())[0]
        connected, code = await third.connect()
        assert (connected, code) == (False, 4429)
        other = _socket(theirs)
        assert (await other.connect())[0], "another tenant's sockets are not affected"
        await first.disconnect()
        again = _socket(mine)
        assert (await again.connect())[0], "a closed socket gives its slot back"
        for socket in (second, other, again):
            await socket.disconnect()

    async_to_sync(scenario)()


def test_a_slot_whose_holder_died_expires(tenant, settings):
    """A process killed with sockets open never releases them: their slots expire after the TTL
    (renewed every third of it while a socket is open)."""
    settings.CHIME_QUOTA_MAX_LIVE_CONNECTIONS = 1
    assert quotas.live_connection_acquire(tenant.pk, "dead-process-socket")
    assert not quotas.live_connection_acquire(tenant.pk, "new-socket")
    client = redis.Redis.from_url(settings.REDIS_URL)
    key = f"chime:limit:live:{tenant.pk}"
    assert 0 < client.pttl(key) <= quotas.LIVE_CONNECTION_TTL_SECONDS * 1000
    # Time passes on the Redis clock: rewrite the dead slot's expiry to a moment past.
    client.zadd(key, {"dead-process-socket": 1})
    assert quotas.live_connection_acquire(tenant.pk, "new-socket")


# --- the admin ---------------------------------------------------------------------------------


@pytest.fixture
def staff(db):
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_superuser("staff", "staff@chime.test", "pw-Chime-2026!")
    client = Client()
    client.force_login(user)
    return client


def admin_form(tenant, **limits) -> dict:
    data = {
        "slug": tenant.slug,
        "name": tenant.name,
        "limits-TOTAL_FORMS": "1",
        "limits-INITIAL_FORMS": "0",
        "limits-MIN_NUM_FORMS": "0",
        "limits-MAX_NUM_FORMS": "1",
        "limits-0-tenant": str(tenant.pk),
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    data.update({f"limits-0-{name}": str(value) for name, value in limits.items()})
    return data


def test_staff_override_a_tenants_limits_in_the_admin_and_see_the_defaults(staff, tenant, api, settings):
    url = f"/admin/tenants/tenant/{tenant.pk}/change/"
    html = staff.get(url).content.decode()
    assert f"Default: {settings.CHIME_QUOTA_MAX_JOBS} (CHIME_QUOTA_MAX_JOBS)" in html
    bad = staff.post(url, admin_form(tenant, api_rate_limit="lots"))
    assert bad.status_code == 200 and "is not a rate" in bad.content.decode()
    assert staff.post(url, admin_form(tenant, max_jobs=1, api_rate_limit="2/min")).status_code == 302
    assert (quotas.effective_limits(tenant.pk).max_jobs, str(quotas.effective_limits(tenant.pk).api_rate)) == (
        1,
        "2/min",
    )
    assert create_job(api).status_code == 201
    assert_refused(create_job(api), 403, "max_jobs", 1)
    assert_refused(api.get("/api/v1/jobs"), 429, "api_rate", "2/min")  # its third request in a minute
