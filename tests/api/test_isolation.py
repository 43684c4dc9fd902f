"""Tenant isolation on every route of the API: tenant B's key against tenant A's objects.

The URL conf is walked, so a route added without an entry in ROUTES fails this test.
"""

import re
from datetime import UTC, datetime

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from apps.history.models import ArchiveKind, RunArchive
from apps.jobs.models import JobDefinition, JobRun, RunStatus

pytestmark = pytest.mark.django_db

# Route name -> what tenant B may see there. "object": 404 for A's object on every method.
# "collection": B's own view; A's ids must not appear. "public": no tenant data at all.
ROUTES = {
    "api:job-list": "collection",
    "api:job-batch": "collection",  # creates B's own jobs only (tests/api/test_jobs_batch.py)
    "api:job-detail": "object",
    "api:job-pause": "object",
    "api:job-resume": "object",
    "api:job-trigger": "object",
    "api:job-backfill": "object",
    "api:job-runs": "object",
    "api:run-list": "collection",
    "api:run-detail": "object",
    "api:run-cancel": "object",
    "api:run-replay": "object",
    "api:run-replay-many": "collection",
    "api:api-key-list": "collection",
    "api:api-key-detail": "object",
    "api:signing-secret": "collection",
    "api:signing-secret-rotate": "collection",
    "api:schedule-preview": "collection",
    "api:archive-list": "collection",
    "api:archive-download": "object",  # tests/history/test_api.py downloads A's own file too
    "api:stats": "collection",  # the caller's runs only (tests/api/test_stats.py: others' not counted)
    "api:operation-list": "collection",
    "api:operation-replay": "collection",  # B's own dead letters only (tests/operations/test_operations.py)
    "api:operation-backfill": "collection",  # B's own jobs only: A's job is "No such job."
    "api:operation-export": "collection",  # B's own runs only (tests/operations/test_history_kinds.py)
    "api:operation-prune": "collection",
    "api:operation-detail": "object",  # the caller's runs only (tests/api/test_stats.py: others' not counted)
    "api:schema": "public",
    "api:docs": "public",
    "api:not-found": "catch-all",  # JSON 404 for any other path; holds nothing
}


def api_routes():
    """(name, path template, methods) for every route under apps.api.urls."""
    resolver = get_resolver("apps.api.urls")
    found = []

    def walk(patterns, prefix):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
                continue
            assert isinstance(pattern, URLPattern)
            callback = pattern.callback
            actions = getattr(callback, "actions", None)
            if actions:
                methods = [m.upper() for m in actions]
            else:
                view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
                methods = [
                    m.upper()
                    for m in getattr(view_class, "http_method_names", ["get"])
                    if hasattr(view_class, m) and m not in ("options", "head", "trace")
                ]
            found.append((f"api:{pattern.name}", prefix + str(pattern.pattern), methods))

    walk(resolver.url_patterns, "")
    return found


def test_every_api_route_is_covered():
    names = {name for name, _, _ in api_routes()}
    missing = names - set(ROUTES)
    assert not missing, f"routes without an isolation rule: {sorted(missing)}"


@pytest.fixture
def tenant_a_objects(api, tenant):
    job = api.post(
        "/api/v1/jobs",
        {
            "name": "a-secret-job",
            "schedule": {"type": "cron", "expression": "0 * * * *"},
            "target": {"url": "https://example.com/a"},
        },
        format="json",
    ).json()
    definition = JobDefinition.objects.get(pk=job["id"])
    when = datetime(2026, 1, 1, tzinfo=UTC)
    run = JobRun.objects.create(
        tenant=tenant,
        definition=definition,
        partition=definition.partition,
        scheduled_for=when,
        available_at=when,
        status=RunStatus.FAILED,
    )
    key = api.post("/api/v1/api-keys", {"name": "a-key"}, format="json").json()
    secret = api.get("/api/v1/signing-secret").json()["secret"]
    operation = api.post("/api/v1/operations/replay", {"job": job["id"]}, format="json").json()
    archive = RunArchive.objects.create(
        tenant=tenant,
        kind=ArchiveKind.PRUNE,
        day=when.date(),
        part=1,
        path="prune/a.jsonl.gz",
        run_count=1,
        attempt_count=0,
        bytes=1,
        sha256="0" * 64,
    )
    return {
        "job": job["id"],
        "run": str(run.id),
        "api-key": key["id"],
        "secret": secret,
        "archive": str(archive.id),
        "operation": operation["id"],
    }


def path_for(template: str, name: str, objects: dict) -> str:
    resource = name.split(":")[1].rsplit("-", 1)[0] if "-" in name else ""
    kind = "api-key" if resource.startswith("api-key") else resource.split("-")[0]
    path = template.replace("^", "").replace("$", "")
    path = re.sub(r"\(\?P<pk>[^)]*\)", objects.get(kind, ""), path)
    path = re.sub(r"<[^>]+>", objects.get(kind, ""), path)
    return "/api/v1/" + path.lstrip("/")


def test_tenant_b_gets_404_for_every_object_of_tenant_a(other_api, tenant_a_objects):
    checked = 0
    for name, template, methods in api_routes():
        if ROUTES[name] != "object":
            continue
        path = path_for(template, name, tenant_a_objects)
        for method in methods:
            response = getattr(other_api, method.lower())(path, {}, format="json")
            assert response.status_code == 404, (method, path, response.status_code, response.content[:200])
            checked += 1
    assert checked >= 12  # 3 verbs on a job, 5 job actions, a run and 2 run actions, a key
    # and nothing changed on A's side
    assert JobDefinition.objects.get(pk=tenant_a_objects["job"]).status == "active"
    assert JobRun.objects.get(pk=tenant_a_objects["run"]).status == RunStatus.FAILED


def test_tenant_b_sees_none_of_tenant_a_in_collections(other_api, tenant_a_objects):
    secrets = set(tenant_a_objects.values())
    for name, template, methods in api_routes():
        if ROUTES[name] != "collection":
            continue
        path = path_for(template, name, tenant_a_objects)
        for method in methods:
            body = {"expression": "* * * * *"} if "preview" in name else {}
            response = getattr(other_api, method.lower())(path, body, format="json")
            assert response.status_code < 500, (method, path)
            text = response.content.decode()
            leaked = [value for value in secrets if value in text]
            assert not leaked, (method, path, leaked)
    # Replaying "all failed runs" as B touched none of A's.
    assert JobRun.objects.get(pk=tenant_a_objects["run"]).status == RunStatus.FAILED


def test_public_routes_carry_no_tenant_data(client, tenant_a_objects):
    for name, template, _ in api_routes():
        if ROUTES[name] == "public":
            response = client.get(path_for(template, name, tenant_a_objects))
            assert response.status_code == 200
            assert not any(value in response.content.decode() for value in tenant_a_objects.values())
