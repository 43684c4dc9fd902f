"""Django admin for staff: tenants, memberships, API keys (never a raw key: only prefixes exist)."""

from django.contrib import admin, messages
from django.http import HttpResponse
from django.utils import timezone

from . import quotas
from .models import ApiKey, Membership, Tenant, TenantLimits


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]


class TenantLimitsInline(admin.StackedInline):
    """Per-tenant overrides of the quotas; a blank field keeps the setting's default."""

    model = TenantLimits
    extra = 1
    max_num = 1
    verbose_name_plural = "limits (blank: the default from settings)"

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        defaults = quotas.default_limits()
        for name, field in formset.form.base_fields.items():
            default = getattr(defaults, "api_rate" if name == "api_rate_limit" else name, None)
            if default is not None:
                setting = quotas.LIMIT_SETTINGS["api_rate" if name == "api_rate_limit" else name]
                field.help_text = f"{field.help_text} Default: {default} ({setting}).".strip()
        return formset


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    readonly_fields = ["id", "created_at"]
    inlines = [TenantLimitsInline, MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug"]
    raw_id_fields = ["user"]
    list_select_related = ["user", "tenant"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "tenant", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["tenant", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "tenant__slug"]
    list_select_related = ["tenant"]
    fields = ["id", "tenant", "name", "prefix", "created_at", "last_used_at", "revoked_at"]  # not key_hash
    readonly_fields = ["id", "tenant", "prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke_selected"]

    def has_add_permission(self, request):
        return False  # a raw key must be shown to someone once: create keys in the dashboard or the CLI

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke_selected(self, request, queryset):
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)


_admin_login = admin.site.login


def throttled_admin_login(request, extra_context=None):
    """The admin's login form counts against the same per-account and per-address limits as the
    dashboard's (apps/tenants/quotas.py): staff accounts are worth the most to a guesser."""
    if request.method == "POST":
        decision = quotas.take_login_attempt(
            username=request.POST.get("username", ""), address=quotas.client_address(request.META)
        )
        if not decision.allowed:
            minutes = max(1, -(-decision.retry_after_seconds // 60))
            response = HttpResponse(
                f"Too many login attempts. Try again in {minutes} minute(s).", status=429, content_type="text/plain"
            )
            response["Retry-After"] = str(decision.retry_after_seconds)
            return response
    return _admin_login(request, extra_context)


admin.site.login = throttled_admin_login
