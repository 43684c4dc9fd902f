from django.contrib import admin

from .models import Operation


@admin.register(Operation)
class OperationAdmin(admin.ModelAdmin):
    """Operations of every tenant; their Celery state is in django-celery-results' Task results."""

    list_display = ["id", "tenant", "kind", "done", "total", "created_by", "created_at", "finished_at"]
    list_filter = ["kind", ("finished_at", admin.EmptyFieldListFilter)]
    search_fields = ["id", "task_id", "tenant__slug", "idempotency_key"]
    list_select_related = ["tenant"]
    readonly_fields = [f.name for f in Operation._meta.fields]
    ordering = ["-id"]

    def has_add_permission(self, request):
        return False  # started through the API or the dashboard, which validate the parameters
