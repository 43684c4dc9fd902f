"""Base for every resource view: the tenant comes from the API key, and every lookup is scoped to it."""

from rest_framework import viewsets


class TenantViewSet(viewsets.GenericViewSet):
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    @property
    def tenant(self):
        return self.request.user.tenant
