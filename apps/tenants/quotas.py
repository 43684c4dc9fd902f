"""Tenant quotas and fair limits: the one home for every limit (docs/api.md#limits-and-quotas).

A tenant's effective limits are the settings' defaults (CHIME_QUOTA_*, CHIME_API_RATE_LIMIT) with
its TenantLimits row (the admin) laid over them. Each check raises `QuotaExceeded`, which names
the limit and says how the interfaces answer: 400 when a request asks for more than a limit allows
(a field), 403 when the tenant already holds all it may, 429 with Retry-After for a rate.
Counting what a tenant holds is left to the app that owns the rows (apps/jobs counts jobs); rates
and connection slots are counted atomically in Redis (apps/tenants/ratelimit.py).

Login and password-reset throttles are here too (per account and per client address): they are
not a tenant's quota, but they are limits, and one place lists them all.
"""

import hashlib
from dataclasses import dataclass, fields

from django.conf import settings

from .models import ApiKey, Tenant, TenantLimits
from .ratelimit import Decision, Rate, acquire, release


@dataclass(frozen=True)
class Limits:
    max_jobs: int
    max_api_keys: int
    max_backfill_runs: int
    triggers_per_minute: int
    min_retry_backoff_seconds: int
    max_retry_attempts: int
    max_live_connections: int
    run_retention_days: int
    api_rate: Rate


# Limit name -> the setting holding its default (README.md#configuration).
LIMIT_SETTINGS = {
    "max_jobs": "CHIME_QUOTA_MAX_JOBS",
    "max_api_keys": "CHIME_QUOTA_MAX_API_KEYS",
    "max_backfill_runs": "CHIME_QUOTA_MAX_BACKFILL_RUNS",
    "triggers_per_minute": "CHIME_QUOTA_TRIGGERS_PER_MINUTE",
    "min_retry_backoff_seconds": "CHIME_QUOTA_MIN_RETRY_BACKOFF_SECONDS",
    "max_retry_attempts": "CHIME_QUOTA_MAX_RETRY_ATTEMPTS",
    "max_live_connections": "CHIME_QUOTA_MAX_LIVE_CONNECTIONS",
    "run_retention_days": "CHIME_RUN_RETENTION_DAYS",
    "api_rate": "CHIME_API_RATE_LIMIT",
}


def default_limits() -> Limits:
    values = {name: getattr(settings, setting) for name, setting in LIMIT_SETTINGS.items()}
    values["api_rate"] = Rate.parse(values["api_rate"])
    return Limits(**values)


def effective_limits(tenant) -> Limits:
    """The settings' defaults with the tenant's admin overrides (blank fields keep the default).
    `tenant`: an id, or a Tenant loaded with select_related("limits") (no query then: API key
    authentication loads it so, and the rate limit needs it on every request)."""
    limits = default_limits()
    relation = Tenant._meta.get_field("limits")
    if isinstance(tenant, Tenant) and relation.is_cached(tenant):
        override = relation.get_cached_value(tenant)
    else:
        override = TenantLimits.objects.filter(tenant_id=getattr(tenant, "pk", tenant)).first()
    if override is None:
        return limits
    values = {f.name: getattr(limits, f.name) for f in fields(Limits)}
    for name in values:
        value = getattr(override, "api_rate_limit" if name == "api_rate" else name)
        if value is not None and value != "":
            values[name] = Rate.parse(value) if name == "api_rate" else value
    return Limits(**values)


class QuotaExceeded(Exception):
    """A refusal naming its limit. `status`: 400 (asks for more than allowed: `field` says where),
    403 (holds all it may), 429 (a rate: retry after `retry_after_seconds`)."""

    def __init__(self, message: str, *, limit: str, value, status: int, field: str = "", retry_after_seconds: int = 0):
        super().__init__(message)
        self.message, self.limit, self.value, self.status = message, limit, value, status
        self.field, self.retry_after_seconds = field, retry_after_seconds


def lock_tenant(tenant_id) -> None:
    """Serialize the count-then-create of one tenant's jobs or keys (inside the caller's
    transaction), so two concurrent creates cannot both take the last slot.

    FOR NO KEY UPDATE, not FOR UPDATE: it conflicts with itself (the serialization) but not with
    the FOR KEY SHARE that every insert of a row pointing at the tenant takes (a job, a run, a
    key). So a create may insert its rows first and lock last, right before its commit (the lock is
    then held for the count and the commit only), and the scheduler's run inserts never wait for
    an API create, nor the other way round."""
    Tenant.objects.select_for_update(no_key=True).filter(pk=tenant_id).values_list("pk").first()


def check_job_count(tenant, *, current: int, adding: int = 1) -> None:
    """`current`: the tenant's jobs that are not deleted or completed (paused ones count: they can
    be resumed or triggered at any moment), not counting the `adding` jobs being created.
    `tenant`: an id or a Tenant (see effective_limits)."""
    limit = effective_limits(tenant).max_jobs
    if current + adding > limit:
        more = f"; {adding} more would exceed it" if adding > 1 else ": delete one first"
        raise QuotaExceeded(
            f"This tenant has {current} jobs, its limit (max_jobs) is {limit}{more}.",
            limit="max_jobs",
            value=limit,
            status=403,
        )


def check_api_key_slot(tenant_id) -> None:
    """Call inside a transaction: locks the tenant, then counts its active (not revoked) keys."""
    lock_tenant(tenant_id)
    limit = effective_limits(tenant_id).max_api_keys
    current = ApiKey.objects.filter(tenant_id=tenant_id, revoked_at__isnull=True).count()
    if current >= limit:
        raise QuotaExceeded(
            f"This tenant has {current} active API keys, its limit (max_api_keys) is {limit}: revoke one first.",
            limit="max_api_keys",
            value=limit,
            status=403,
        )


def check_backfill_size(tenant_id, *, occurrences: int) -> None:
    limit = effective_limits(tenant_id).max_backfill_runs
    if occurrences > limit:
        raise QuotaExceeded(
            f"That range has more than {limit} occurrences, the limit of one backfill (max_backfill_runs): split it.",
            limit="max_backfill_runs",
            value=limit,
            status=400,
            field="end",
        )


def max_backfill_runs(tenant_id) -> int:
    return effective_limits(tenant_id).max_backfill_runs


def check_retry_policy(tenant, *, max_attempts: int, initial_backoff_seconds: int) -> None:
    """Fields are the JobDefinition's (retry_max_attempts, retry_initial_backoff_seconds).
    `tenant`: an id or a Tenant (see effective_limits)."""
    limits = effective_limits(tenant)
    if max_attempts > limits.max_retry_attempts:
        raise QuotaExceeded(
            f"At most {limits.max_retry_attempts} attempts for this tenant (limit max_retry_attempts).",
            limit="max_retry_attempts",
            value=limits.max_retry_attempts,
            status=400,
            field="retry_max_attempts",
        )
    if initial_backoff_seconds < limits.min_retry_backoff_seconds:
        raise QuotaExceeded(
            f"At least {limits.min_retry_backoff_seconds} seconds for this tenant (limit min_retry_backoff_seconds).",
            limit="min_retry_backoff_seconds",
            value=limits.min_retry_backoff_seconds,
            status=400,
            field="retry_initial_backoff_seconds",
        )


def _raise_throttled(decision: Decision, *, limit: str, value, what: str) -> None:
    if not decision.allowed:
        raise QuotaExceeded(
            f"{what} ({limit}: {value}); retry in {decision.retry_after_seconds} s.",
            limit=limit,
            value=str(value),
            status=429,
            retry_after_seconds=decision.retry_after_seconds,
        )


def take_api_request(tenant: Tenant, *, weight: int = 1) -> None:
    """One API request of the tenant, whichever key made it: the budget is the tenant's.
    `weight`: a request that counts as that many (a batch create, docs/api.md#batch-create)."""
    rate = effective_limits(tenant).api_rate
    if weight > rate.count:
        raise QuotaExceeded(
            f"This request counts as {weight} API requests, more than this tenant's whole API rate limit "
            f"(api_rate: {rate}) allows in a window: send it in smaller parts.",
            limit="api_rate",
            value=str(rate),
            status=400,
            field="jobs",
        )
    decision = acquire(f"api:{tenant.pk}", limit=rate.count, ttl_seconds=rate.seconds, cost=weight)
    _raise_throttled(decision, limit="api_rate", value=rate, what="Over this tenant's API rate limit")


def take_trigger(tenant_id) -> None:
    """One manual trigger (any job of the tenant, paused ones too)."""
    limit = effective_limits(tenant_id).triggers_per_minute
    decision = acquire(f"trigger:{tenant_id}", limit=limit, ttl_seconds=60)
    _raise_throttled(decision, limit="triggers_per_minute", value=limit, what="Too many manual triggers")


# A live connection renews its slot every third of this; a process that died without releasing
# frees its slots after this long.
LIVE_CONNECTION_TTL_SECONDS = 60


def live_connection_acquire(tenant_id, connection_id: str) -> bool:
    """Take or renew a slot for one dashboard WebSocket; False when the tenant has them all."""
    limit = effective_limits(tenant_id).max_live_connections
    return acquire(
        f"live:{tenant_id}", limit=limit, ttl_seconds=LIVE_CONNECTION_TTL_SECONDS, member=connection_id
    ).allowed


def live_connection_release(tenant_id, connection_id: str) -> None:
    release(f"live:{tenant_id}", connection_id)


# --- Login and password reset ----------------------------------------------------------------


def client_address(meta) -> str:
    """The client's address: REMOTE_ADDR, or behind CHIME_TRUSTED_PROXY_HOPS proxies (a PaaS
    router) the X-Forwarded-For entry the outermost trusted proxy appended. Entries left of it
    are whatever the client sent, so they are never trusted."""
    hops = settings.CHIME_TRUSTED_PROXY_HOPS
    remote = meta.get("REMOTE_ADDR", "") or "unknown"
    if hops <= 0:
        return remote
    forwarded = [part.strip() for part in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    return forwarded[-hops] if len(forwarded) >= hops else remote


def _digest(text: str) -> str:
    # Redis keys hold no emails or addresses in clear.
    return hashlib.sha256(text.strip().lower().encode()).hexdigest()[:32]


def _take_pair(kind: str, *, account: str, address: str, account_rate: str, address_rate: str) -> Decision:
    """Count one attempt against the client address, then the account (any account name, existing
    or not, so a refusal never tells whether an account exists)."""
    for scope, ident, rate_text in (("address", address, address_rate), ("account", account, account_rate)):
        rate = Rate.parse(rate_text)
        decision = acquire(f"{kind}:{scope}:{_digest(ident)}", limit=rate.count, ttl_seconds=rate.seconds)
        if not decision.allowed:
            return decision
    return Decision(True)


def take_login_attempt(*, username: str, address: str) -> Decision:
    return _take_pair(
        "login",
        account=username,
        address=address,
        account_rate=settings.CHIME_LOGIN_RATE_PER_ACCOUNT,
        address_rate=settings.CHIME_LOGIN_RATE_PER_ADDRESS,
    )


def take_signup(*, address: str) -> Decision:
    """One sign-up attempt from this client address: each sign-up makes a tenant with its own
    quotas, so an unthrottled form would let one client mint tenants (and quotas) at will."""
    rate = Rate.parse(settings.CHIME_SIGNUP_RATE_PER_ADDRESS)
    return acquire(f"signup:address:{_digest(address)}", limit=rate.count, ttl_seconds=rate.seconds)


def take_password_reset(*, email: str, address: str) -> Decision:
    return _take_pair(
        "password-reset",
        account=email,
        address=address,
        account_rate=settings.CHIME_PASSWORD_RESET_RATE_PER_ACCOUNT,
        address_rate=settings.CHIME_PASSWORD_RESET_RATE_PER_ADDRESS,
    )
