"""pause, resume, trigger, backfill, delete, the runs of a job, and the schedule preview."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.jobs.models import JobDefinition, JobRun, RunStatus

pytestmark = pytest.mark.django_db

HOURLY = {
    "name": "hourly",
    "schedule": {"type": "cron", "expression": "0 * * * *", "timezone": "UTC"},
    "target": {"url": "https://example.com/hook"},
}


@pytest.fixture
def job(api):
    return api.post("/api/v1/jobs", HOURLY, format="json").json()


def test_pause_and_resume(api, job):
    paused = api.post(f"/api/v1/jobs/{job['id']}/pause").json()
    assert (paused["status"], paused["enabled"]) == ("paused", False)
    resumed = api.post(f"/api/v1/jobs/{job['id']}/resume").json()
    assert (resumed["status"], resumed["enabled"]) == ("active", True)


def test_resume_records_what_was_missed_during_the_pause(api, time_machine):
    time_machine.move_to(datetime(2026, 11, 29, 6, 30, tzinfo=UTC))
    job = api.post("/api/v1/jobs", {**HOURLY, "misfire_policy": "skip"}, format="json").json()
    api.post(f"/api/v1/jobs/{job['id']}/pause")
    time_machine.move_to(datetime(2026, 11, 29, 10, 30, tzinfo=UTC))

    resumed = api.post(f"/api/v1/jobs/{job['id']}/resume").json()

    runs = api.get(f"/api/v1/jobs/{job['id']}/runs").json()["results"]
    assert sorted(r["scheduled_for"] for r in runs) == [f"2026-11-29T{h:02}:00:00Z" for h in (7, 8, 9, 10)]
    assert {(r["status"], r["status_reason"]) for r in runs} == {("skipped", "Job was paused at the time.")}
    assert resumed["next_fire_at"] == "2026-11-29T11:00:00Z"


def test_trigger_makes_a_manual_run_now(api, job):
    response = api.post(f"/api/v1/jobs/{job['id']}/trigger")
    assert response.status_code == 201
    run = response.json()
    assert run["trigger"] == "manual"
    assert run["status"] == "scheduled"
    assert run["job_id"] == job["id"]
    assert abs(datetime.fromisoformat(run["scheduled_for"]) - datetime.now(UTC)) < timedelta(seconds=5)


def test_backfill_materializes_a_past_range_once(api, job):
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=5)
    body = {"start": start.isoformat(), "end": end.isoformat()}
    first = api.post(f"/api/v1/jobs/{job['id']}/backfill", body, format="json")
    assert first.status_code == 201, first.json()
    assert (first.json()["created"], first.json()["existing"]) == (5, 0)
    assert {r["trigger"] for r in first.json()["runs"]} == {"backfill"}
    again = api.post(f"/api/v1/jobs/{job['id']}/backfill", body, format="json").json()
    assert (again["created"], again["existing"]) == (0, 5)
    assert JobRun.objects.filter(definition_id=job["id"]).count() == 5


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "end"),
        ({"start": "2026-01-01T00:00:00Z", "end": "2999-01-01T00:00:00Z"}, "end"),
        ({"start": "2026-01-01T00:00:00Z"}, "end"),
        ({"start": "yesterday", "end": "2026-01-01T00:00:00Z"}, "start"),
    ],
)
def test_backfill_rejects_bad_ranges(api, job, body, field):
    response = api.post(f"/api/v1/jobs/{job['id']}/backfill", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_backfill_is_bounded(api, job):
    end = datetime.now(UTC) - timedelta(days=1)
    response = api.post(
        f"/api/v1/jobs/{job['id']}/backfill",
        {"start": (end - timedelta(days=60)).isoformat(), "end": end.isoformat()},
        format="json",
    )
    assert response.status_code == 400  # tests/tenants/test_quotas.py: the limit per tenant
    assert response.json()["error"]["limit"] == {"name": "max_backfill_runs", "value": 100}


def test_delete_stops_the_job_cancels_unstarted_runs_and_keeps_history(api, job, tenant):
    definition = JobDefinition.objects.get(pk=job["id"])
    when = datetime(2026, 1, 1, tzinfo=UTC)
    done = JobRun.objects.create(
        tenant=tenant,
        definition=definition,
        partition=definition.partition,
        scheduled_for=when,
        available_at=when,
        status=RunStatus.SUCCEEDED,
    )
    pending = JobRun.objects.create(
        tenant=tenant,
        definition=definition,
        partition=definition.partition,
        scheduled_for=when + timedelta(hours=1),
        available_at=when,
    )

    assert api.delete(f"/api/v1/jobs/{job['id']}").status_code == 204

    assert api.get(f"/api/v1/jobs/{job['id']}").status_code == 404
    assert job["id"] not in [j["id"] for j in api.get("/api/v1/jobs").json()["results"]]
    pending.refresh_from_db()
    assert (pending.status, pending.status_reason) == (RunStatus.CANCELLED, "Job was deleted.")
    done.refresh_from_db()
    assert done.status == RunStatus.SUCCEEDED
    assert api.get(f"/api/v1/runs/{done.id}").status_code == 200
    definition.refresh_from_db()
    assert definition.next_fire_at is None


def test_actions_on_another_tenants_job_are_404(other_api, job):
    for verb, path in [
        ("post", "pause"),
        ("post", "resume"),
        ("post", "trigger"),
        ("post", "backfill"),
        ("get", "runs"),
    ]:
        assert getattr(other_api, verb)(f"/api/v1/jobs/{job['id']}/{path}", {}, format="json").status_code == 404
    assert other_api.delete(f"/api/v1/jobs/{job['id']}").status_code == 404
    assert JobDefinition.objects.get(pk=job["id"]).status == "active"


def test_preview_flags_dst(api):
    response = api.post(
        "/api/v1/schedules/preview",
        {"expression": "30 2 * * *", "timezone": "Europe/Berlin", "count": 3, "start": "2026-03-28T00:00:00Z"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    times = response.json()["fire_times"]
    assert times[0] == {"utc": "2026-03-28T01:30:00Z", "local": "2026-03-28T02:30:00+01:00", "dst": None}
    assert times[1] == {"utc": "2026-03-29T01:00:00Z", "local": "2026-03-29T03:00:00+02:00", "dst": "gap"}
    assert times[2]["utc"] == "2026-03-30T00:30:00Z"


def test_preview_applies_the_dst_policy(api):
    body = {
        "expression": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "count": 2,
        "start": "2026-10-24T12:00:00Z",
        "dst_policy": {"overlap": "both"},
    }
    times = api.post("/api/v1/schedules/preview", body, format="json").json()["fire_times"]
    assert [(t["utc"], t["dst"]) for t in times] == [
        ("2026-10-25T00:30:00Z", "overlap"),
        ("2026-10-25T01:30:00Z", "overlap"),
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"expression": "nope"}, "expression"),
        ({"expression": "* * * * *", "timezone": "Nowhere/Else"}, "timezone"),
        ({"expression": "* * * * *", "count": 1001}, "count"),
        ({"expression": "* * * * *", "count": 0}, "count"),
        ({"expression": "* * * * *", "start": "2026-01-01T00:00:00"}, "start"),
        ({"expression": "* * * * *", "dst_policy": {"gap": "later"}}, "dst_policy.gap"),
    ],
)
def test_preview_rejects_bad_input_naming_the_problem(api, body, field):
    response = api.post("/api/v1/schedules/preview", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_job_contract_carries_the_policies(api):
    body = {
        **HOURLY,
        "misfire_policy": "coalesce",
        "catch_up_limit": 7,
        "jitter_seconds": 30,
        "dst_policy": {"gap": "skip", "overlap": "both"},
    }
    job = api.post("/api/v1/jobs", body, format="json").json()
    assert (job["misfire_policy"], job["catch_up_limit"], job["jitter_seconds"]) == ("coalesce", 7, 30)
    assert job["dst_policy"] == {"gap": "skip", "overlap": "both"}
    defaults = api.post("/api/v1/jobs", HOURLY, format="json").json()
    assert (defaults["misfire_policy"], defaults["catch_up_limit"], defaults["jitter_seconds"]) == ("catch_up", 100, 0)
    assert defaults["dst_policy"] == {"gap": "shift", "overlap": "first"}
