"""Who may see and do what: every dashboard view resolves the tenant from the user's membership.

The current tenant's id is kept in the session, but it only selects among the user's own
memberships: a tenant the user does not belong to is never used, whatever the session or URL says.
Viewers read; unsafe methods (POST, ...) need an owner or admin, and are refused with 403.
"""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from apps.tenants.accounts import can_manage, memberships_of
from apps.tenants.models import Membership

from .zones import viewer_zone

SESSION_TENANT_KEY = "dashboard_tenant_id"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def acting_membership(memberships: list, chosen_tenant_id) -> Membership | None:
    """The session's choice among the user's memberships if still valid, else the first one."""
    membership = next((m for m in memberships if str(m.tenant_id) == str(chosen_tenant_id)), None)
    return membership or (memberships[0] if memberships else None)


def current_membership(request) -> Membership | None:
    request.memberships = memberships_of(request.user)
    membership = acting_membership(request.memberships, request.session.get(SESSION_TENANT_KEY))
    if membership is not None and request.session.get(SESSION_TENANT_KEY) != str(membership.tenant_id):
        request.session[SESSION_TENANT_KEY] = str(membership.tenant_id)
    return membership


def scope_membership(user, session) -> Membership | None:
    """The same choice for a WebSocket (Channels scope: user and session)."""
    return acting_membership(memberships_of(user), session.get(SESSION_TENANT_KEY))


def choose_tenant(request, tenant_id) -> bool:
    """Switch the session to one of the user's tenants; False if the user is not a member."""
    if not any(str(m.tenant_id) == str(tenant_id) for m in memberships_of(request.user)):
        return False
    request.session[SESSION_TENANT_KEY] = str(tenant_id)
    return True


def forbidden(request, message: str):
    return render(request, "dashboard/errors/403.html", {"message": message}, status=403)


def _tenant_view(view, *, manage: bool):
    @login_required
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        membership = current_membership(request)
        if membership is None:
            return render(request, "dashboard/errors/no_tenant.html", status=403)
        request.membership, request.tenant = membership, membership.tenant
        request.can_manage = can_manage(membership)
        if (manage or request.method not in SAFE_METHODS) and not request.can_manage:
            return forbidden(request, "Your role in this tenant is read-only.")
        request.viewer_zone = viewer_zone(request)
        with timezone.override(request.viewer_zone):
            return view(request, *args, **kwargs)

    return wrapper


def member_required(view):
    """Any member may GET; unsafe methods need a managing role."""
    return _tenant_view(view, manage=False)


def manager_required(view):
    """Owners and admins only, even to read (e.g. the signing secret)."""
    return _tenant_view(view, manage=True)
