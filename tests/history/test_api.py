"""GET /api/v1/archives and /archives/{id}/download: tenant-scoped, and a file round-trips."""

import gzip
import json

from django.utils import timezone

from apps.history import services
from apps.history.models import RunArchive
from apps.jobs.models import RunStatus


def _download(api, archive_id):
    response = api.get(f"/api/v1/archives/{archive_id}/download")
    assert response.status_code == 200, response
    assert response["Content-Type"] == "application/octet-stream"
    assert "attachment" in response["Content-Disposition"]
    return b"".join(response.streaming_content)


def test_a_pruned_archive_round_trips_through_the_api(api, tenant, make_runs):
    runs = make_runs(days_old=40, n=3, attempts=2) + make_runs(days_old=100, status=RunStatus.FAILED, attempts=4)
    expected = {str(run.id): (run.status, run.scheduled_for, [a.number for a in run.attempts.all()]) for run in runs}
    services.prune_tenant(tenant=tenant, now=timezone.now())

    listed = api.get("/api/v1/archives").json()
    assert listed["next"] is None and len(listed["results"]) == 2  # two UTC days
    lines = []
    for item in listed["results"]:
        data = _download(api, item["id"])
        assert len(data) == item["bytes"]
        lines += [json.loads(line) for line in gzip.decompress(data).splitlines()]

    assert {line["id"] for line in lines} == set(expected)
    for line in lines:
        status, scheduled_for, numbers = expected[line["id"]]
        assert line["status"] == status
        assert line["scheduled_for"] == scheduled_for.isoformat()
        assert [a["number"] for a in line["attempts"]] == numbers
        assert all(a["request_headers"]["authorization"] != "Bearer s3cret" for a in line["attempts"])


def test_a_tenant_cannot_list_or_download_another_tenants_archive(api, other_api, tenant, make_runs):
    make_runs(days_old=40)
    services.prune_tenant(tenant=tenant, now=timezone.now())
    archive = RunArchive.objects.get(tenant=tenant)

    assert other_api.get("/api/v1/archives").json()["results"] == []
    assert other_api.get(f"/api/v1/archives/{archive.id}/download").status_code == 404
    assert api.get(f"/api/v1/archives/{archive.id}/download").status_code == 200


def test_archive_list_pages_and_filters(api, tenant, make_runs, settings):
    settings.CHIME_PRUNE_BATCH_SIZE = 2
    make_runs(days_old=40, n=5)
    services.prune_tenant(tenant=tenant, now=timezone.now())

    first = api.get("/api/v1/archives", {"limit": 2}).json()
    assert len(first["results"]) == 2 and first["next"]
    assert len(api.get(first["next"]).json()["results"]) == 1
    assert api.get("/api/v1/archives", {"kind": "export"}).json()["results"] == []


def test_bad_archive_input_is_a_400_or_404(api):
    assert api.get("/api/v1/archives", {"kind": "nope"}).json()["error"]["fields"]["kind"]
    assert api.get("/api/v1/archives", {"colour": "red"}).status_code == 400
    assert api.get("/api/v1/archives/not-a-uuid/download").status_code == 404
    assert api.get("/api/v1/archives/0190a3c4-0000-7000-8000-000000000000/download").status_code == 404
