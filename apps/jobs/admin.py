"""Django admin for staff: jobs, and runs with their attempts; dead-letter replay."""

from django.contrib import admin, messages
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse

from . import services
from .models import JobDefinition, JobRun, RunAttempt, RunStatus


@admin.register(JobDefinition)
class JobDefinitionAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "schedule_type", "cron_expression", "timezone", "status", "next_fire_at"]
    list_filter = ["status", "schedule_type", "priority", "tenant"]
    search_fields = ["name", "target_url", "id", "status_reason"]  # "Paused by Chime" finds quarantined jobs
    list_select_related = ["tenant"]
    # The header values are secrets (encrypted at rest, apps/jobs/secrets.py): the admin shows them
    # redacted, as the API and the dashboard do, and does not edit them (a form would render every
    # value in clear). Staff change headers through the API or the dashboard's job form.
    exclude = ["target_headers"]
    readonly_fields = [
        "target_headers_redacted",
        "id",
        "partition",
        "next_fire_at",
        "last_scheduled_for",
        "consecutive_failures",
        "created_at",
        "updated_at",
    ]
    show_full_result_count = False

    @admin.display(description="target headers (secret values redacted)")
    def target_headers_redacted(self, obj):
        return obj.visible_target_headers if obj.pk else {}


class RunAttemptInline(admin.TabularInline):
    model = RunAttempt
    extra = 0
    can_delete = False
    fields = ["number", "started_at", "status_code", "duration_ms", "error_kind", "error", "response_excerpt", "worker"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    """Runs are written by the scheduler and workers: read-only here, except replaying dead letters."""

    change_form_template = "admin/jobs/jobrun/change_form.html"
    list_display = ["id", "definition", "tenant", "status", "trigger", "scheduled_for", "attempt_count", "finished_at"]
    list_filter = ["status", "trigger", "tenant"]
    search_fields = ["id", "definition__name"]
    list_select_related = ["definition", "tenant"]
    raw_id_fields = ["definition", "tenant"]
    inlines = [RunAttemptInline]
    actions = ["replay_dead_letters"]
    show_full_result_count = False
    ordering = ["-created_at"]

    def has_add_permission(self, request):
        return False

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in JobRun._meta.fields]

    @admin.action(description="Replay selected dead-lettered runs", permissions=["change"])
    def replay_dead_letters(self, request, queryset):
        replayed = services.runs_replay_failed(runs=queryset)
        skipped = queryset.count() - replayed
        note = f" ({skipped} selected run(s) were not failed and were left alone)" if skipped > 0 else ""
        self.message_user(request, f"Replayed {replayed} run(s){note}.", messages.SUCCESS)

    def get_urls(self):
        replay = path(
            "<path:object_id>/replay/",
            self.admin_site.admin_view(self.replay_view),
            name="jobs_jobrun_replay",
        )
        return [replay, *super().get_urls()]

    def replay_view(self, request, object_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        run = get_object_or_404(JobRun, pk=object_id)
        if not self.has_change_permission(request, run):
            return HttpResponseRedirect(reverse("admin:jobs_jobrun_change", args=[run.pk]))
        try:
            services.run_replay(run=run)
            self.message_user(request, "Replayed: the run is scheduled again.", messages.SUCCESS)
        except services.JobActionError as error:
            self.message_user(request, str(error), messages.ERROR)
        return HttpResponseRedirect(reverse("admin:jobs_jobrun_change", args=[run.pk]))

    def render_change_form(self, request, context, *args, obj=None, **kwargs):
        context["can_replay"] = obj is not None and obj.status == RunStatus.FAILED
        return super().render_change_form(request, context, *args, obj=obj, **kwargs)
