"""`Authorization: Bearer <api key>`: puts the key's tenant on the request."""

from dataclasses import dataclass

from rest_framework import authentication, exceptions

from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import api_key_authenticate


@dataclass(frozen=True)
class TenantPrincipal:
    """What `request.user` is for an API call: the tenant acting through one of its keys."""

    tenant: Tenant
    api_key: ApiKey
    is_authenticated: bool = True
    is_anonymous: bool = False

    @property
    def pk(self):
        return self.api_key.pk  # the key; the rate limit counts per tenant (apps/api/throttling.py)


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw_key = header.partition(" ")
        if scheme != self.keyword or not raw_key.strip():
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <api key>'.")
        api_key = api_key_authenticate(raw_key.strip())
        if api_key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        request.tenant = api_key.tenant
        return TenantPrincipal(tenant=api_key.tenant, api_key=api_key), api_key

    def authenticate_header(self, request):
        return self.keyword
