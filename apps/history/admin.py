"""The archive index for staff: every tenant's archive files, read-only (rows are written by prunes
and exports only, in the transaction that deletes or copies their runs)."""

from django.contrib import admin

from .models import RunArchive


@admin.register(RunArchive)
class RunArchiveAdmin(admin.ModelAdmin):
    list_display = ["day", "part", "kind", "tenant", "run_count", "attempt_count", "bytes", "created_at"]
    list_filter = ["kind", "tenant"]
    search_fields = ["tenant__slug", "path"]
    list_select_related = ["tenant"]
    date_hierarchy = "day"
    readonly_fields = [f.name for f in RunArchive._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
