"""Small helpers shared by the dashboard views."""

from django.core.exceptions import BadRequest
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme

PAGE_SIZE = 50
#: Deeper pages are an OFFSET scan over the whole tenant's history (and past a bigint, a database
#: error): the lists' filters narrow a search instead.
MAX_PAGE = 1000


def redirect_back(request, fallback: str, **kwargs):
    """After a no-JavaScript form POST: back to the page it came from (same host only)."""
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return redirect(target)
    return redirect(fallback, **kwargs)


def page_of(request, queryset, size: int = PAGE_SIZE):
    """One page of a queryset, without counting the whole table (no total, just older/newer)."""
    raw = request.GET.get("page", "1")
    try:
        number = max(int(raw), 1)
    except ValueError:
        number = 1
    if number > MAX_PAGE:
        raise BadRequest(f"Page {raw[:24]} is beyond the last page ({MAX_PAGE}): narrow the list with its filters.")
    rows = list(queryset[(number - 1) * size : number * size + 1])
    return {
        "rows": rows[:size],
        "number": number,
        "has_next": len(rows) > size,
        "has_previous": number > 1,
    }


def query_without_page(request) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()
