"""What a live page shows, and the rows to push when runs change (used by the WebSocket consumer).

A page that wants live updates describes itself with a LiveView (which list, which filter, since
when it was rendered); the consumer renders the changed rows with the page's own row partials,
from the database and within the tenant, so the HTML is the same as on a reload.
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.template.loader import render_to_string
from django.utils import timezone

from apps.jobs.listings import jobs_with_last_run, runs_by_ids
from apps.jobs.models import JobDefinition, RunStatus
from apps.tenants.accounts import can_manage

from .zones import zone_or_none

KINDS = ("runs", "dead", "job", "jobs")
ROW_TEMPLATES = {
    "runs": "dashboard/runs/rows.html#run-row",
    "job": "dashboard/runs/rows.html#run-row",
    "dead": "dashboard/runs/rows.html#dead-row",
}
JOB_ROW_TEMPLATE = "dashboard/jobs/rows.html#job-row"
POLL_SECONDS = 2


def live_mode() -> str:
    """ "socket" with Redis; "poll" in embedded mode, where events cannot cross processes."""
    return "socket" if settings.REDIS_URL else "poll"


@dataclass(frozen=True)
class LiveView:
    kind: str
    since: datetime
    job_id: UUID | None = None
    status: str = ""
    zone: str = ""  # the time zone the page was rendered in: pushed rows use the same

    @classmethod
    def parse(cls, params: dict[str, str]) -> "LiveView | None":
        kind = params.get("view", "")
        if kind not in KINDS:
            return None
        try:
            since = datetime.fromtimestamp(float(params.get("since", "0")), UTC)
            job_id = UUID(params["job"]) if params.get("job") else None
        except (ValueError, OverflowError, OSError):
            return None
        status = params.get("status", "")
        if status and status not in RunStatus.values:
            return None
        if kind == "job" and job_id is None:
            return None
        zone = params.get("tz", "")
        if zone and zone_or_none(zone) is None:
            return None
        return cls(kind=kind, since=since, job_id=job_id, status=status, zone=zone)

    def query(self) -> str:
        params = {"view": self.kind, "since": f"{self.since.timestamp():.3f}"}
        if self.job_id:
            params["job"] = str(self.job_id)
        if self.status:
            params["status"] = self.status
        if self.zone:
            params["tz"] = self.zone
        return urlencode(params)

    def shows(self, run) -> bool:
        """Whether a run that is not on the page yet belongs at its top."""
        if self.kind == "dead":
            return run.status == RunStatus.FAILED
        if self.job_id and run.definition_id != self.job_id:
            return False
        if self.status:
            return run.status == self.status
        return run.created_at >= self.since


def page_live(kind: str, **filters) -> dict:
    """Template context for a live list: the mode and, for sockets, the query of the view."""
    view = LiveView(kind=kind, since=timezone.now(), zone=timezone.get_current_timezone_name(), **filters)
    return {"mode": live_mode(), "query": view.query(), "poll_seconds": POLL_SECONDS}


def job_in_tenant(tenant_id, job_id) -> bool:
    return JobDefinition.objects.filter(tenant_id=tenant_id, pk=job_id).exists()


def render_rows(*, membership, view: LiveView, run_ids, zone) -> list[dict]:
    """[{"id": element id, "html": row HTML, "insert": bool}] for the changed runs of this tenant."""
    tenant = membership.tenant
    runs = runs_by_ids(tenant=tenant, run_ids=run_ids)
    context = {"can_manage": can_manage(membership), "show_job": view.kind != "job", "csrf_token": ""}
    with timezone.override(zone):
        if view.kind == "jobs":
            job_ids = {run.definition_id for run in runs}
            jobs = jobs_with_last_run(tenant=tenant).filter(pk__in=job_ids)
            return [
                {
                    "id": f"job-{job.id}",
                    "html": render_to_string(JOB_ROW_TEMPLATE, {**context, "job": job}),
                    "insert": False,
                }
                for job in jobs
            ]
        if view.job_id:
            runs = [run for run in runs if run.definition_id == view.job_id]
        template = ROW_TEMPLATES[view.kind]
        return [
            {
                "id": f"run-{run.id}",
                "html": render_to_string(template, {**context, "run": run}),
                "insert": view.shows(run),
            }
            for run in runs
        ]
