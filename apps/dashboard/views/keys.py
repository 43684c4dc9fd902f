"""API keys (create: the raw key is shown once; list; revoke) and the webhook signing secret."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.tenants.models import ApiKey
from apps.tenants.quotas import QuotaExceeded
from apps.tenants.selectors import api_key_get, api_key_list, signing_secret_current
from apps.tenants.services import api_key_create as create_key
from apps.tenants.services import api_key_revoke as revoke_key
from apps.tenants.services import signing_secret_rotate as rotate_secret

from ..access import manager_required, member_required
from ..forms.accounts import ApiKeyForm


def _keys_page(request, *, form=None, created=None, status=200):
    context = {"keys": api_key_list(tenant=request.tenant), "form": form or ApiKeyForm(), "created": created}
    if request.htmx:
        return render(request, "dashboard/keys/list.html#keys", context, status=status)
    return render(request, "dashboard/keys/list.html", context, status=status)


@member_required
def api_keys(request):
    return _keys_page(request)


@member_required
@require_POST
def api_key_create(request):
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        return _keys_page(request, form=form, status=400)
    # Rendered in this response only: the raw key is not stored anywhere (only its hash).
    try:
        created = create_key(tenant=request.tenant, name=form.cleaned_data["name"])
    except QuotaExceeded as refusal:
        form.add_error("name", refusal.message)
        return _keys_page(request, form=form, status=refusal.status)
    return _keys_page(request, created=created)


@member_required
@require_POST
def api_key_revoke(request, key_id):
    try:
        key = api_key_get(tenant=request.tenant, api_key_id=key_id)
    except ApiKey.DoesNotExist as error:
        raise Http404("No such key.") from error
    revoke_key(api_key=key)
    if request.htmx:
        return _keys_page(request)
    messages.success(request, f"Key {key.prefix}… revoked; the API refuses it from now on.")
    return redirect("dashboard:api_keys")


@manager_required
def signing_secret(request):
    """The current secret, revealed on request (HTMX swaps it in; without JS it is a page)."""
    context = {"secret": signing_secret_current(tenant=request.tenant)}
    if request.htmx:
        return render(request, "dashboard/keys/signing_secret.html#secret", context)
    return render(request, "dashboard/keys/signing_secret.html", context)


@manager_required
@require_POST
def signing_secret_rotate(request):
    secret = rotate_secret(tenant=request.tenant)
    if request.htmx:
        return render(request, "dashboard/keys/signing_secret.html#secret", {"secret": secret, "rotated": True})
    messages.success(request, "New signing secret. The previous one keeps signing alongside it for 24 hours.")
    return redirect("dashboard:signing_secret")
