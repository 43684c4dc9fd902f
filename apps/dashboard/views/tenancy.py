"""Per-user choices: which tenant to act in, which time zone to read times in."""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from ..access import choose_tenant, current_membership
from ..zones import CHOICE_COOKIE, COOKIE_MAX_AGE, timezone_names, viewer_zone, zone_or_none
from .common import redirect_back


@login_required
@require_POST
def switch_tenant(request):
    if not choose_tenant(request, request.POST.get("tenant", "")):
        raise Http404("No such tenant.")  # not "forbidden": do not confirm that it exists
    return redirect("dashboard:overview")


@login_required
def set_timezone(request):
    """Save a display time zone, or clear it to follow the browser's."""
    if request.method != "POST":
        membership = current_membership(request)  # for the navigation only
        request.membership = membership
        request.tenant = membership.tenant if membership else None
        context = {"choice": request.COOKIES.get(CHOICE_COOKIE, ""), "timezone_names": timezone_names()}
        with timezone.override(viewer_zone(request)):
            return render(request, "dashboard/preferences.html", context)
    response = redirect_back(request, "dashboard:overview")
    zone = zone_or_none(request.POST.get("timezone", "").strip())
    if zone is None:
        response.delete_cookie(CHOICE_COOKIE)
    else:
        response.set_cookie(CHOICE_COOKIE, zone.key, max_age=COOKIE_MAX_AGE, samesite="Lax")
    return response
