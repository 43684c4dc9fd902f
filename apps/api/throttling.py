"""The API rate limit, per tenant: every key of a tenant draws on one budget (minting keys does not
multiply it), counted atomically in Redis across keys and web processes (apps/tenants/quotas.py)."""

from rest_framework.throttling import BaseThrottle

from apps.tenants import quotas


class TenantRateThrottle(BaseThrottle):
    """Raises QuotaExceeded (429 with Retry-After, apps/api/errors.py) instead of returning False:
    DRF's own refusal cannot say which limit was hit."""

    def allow_request(self, request, view):
        tenant = getattr(request.user, "tenant", None)
        if tenant is None:
            return True  # not authenticated: refused before any budget is spent
        quotas.take_api_request(tenant)
        return True
