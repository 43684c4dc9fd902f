from rest_framework.permissions import BasePermission

from .authentication import TenantPrincipal


class IsTenantAuthenticated(BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, TenantPrincipal)
