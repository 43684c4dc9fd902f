"""Invariant 4 on the dashboard: a user of tenant A sees nothing of tenant B and can change nothing
of it, on any page or partial; a viewer reads but cannot change anything; CSRF on every POST."""

import pytest
from django.test import Client
from django.urls import reverse

from apps.history.models import RunArchive
from apps.jobs.models import JobRun, JobStatus, RunStatus
from apps.operations.models import Operation
from apps.operations.services import operation_start
from apps.tenants.models import ApiKey, Membership, Role
from apps.tenants.services import api_key_create

from .conftest import logged_in, make_run

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def other_objects(other_job, other_failed_run, other_tenant):
    key = api_key_create(tenant=other_tenant, name="globex-key").api_key
    operation = operation_start(tenant=other_tenant, kind="replay", params={}, created_by="user:globex-owner")
    archive = RunArchive.objects.create(
        tenant=other_tenant,
        kind="prune",
        day="2026-01-01",
        part=1,
        path="x.gz",
        run_count=1,
        attempt_count=0,
        bytes=1,
        sha256="0" * 64,
    )
    return {
        "job": other_job.id,
        "run": other_failed_run.id,
        "key": key.id,
        "archive": archive.id,
        "operation": operation.id,
    }


# Every dashboard route, by what it holds. A route added without an entry here fails
# test_every_route_is_classified, so it cannot skip the isolation tests below.
ROUTES = {
    "signup": "public",
    "login": "public",
    "logout": "public",
    "password_reset": "public",
    "password_reset_done": "public",
    "password_reset_confirm": "public",
    "password_reset_complete": "public",
    "switch_tenant": "user",  # checked against the user's memberships
    "set_timezone": "user",
    "overview": "tenant",
    "health": "tenant",
    "job_list": "tenant",
    "job_create": "tenant",
    "schedule_preview": "tenant",
    "run_list": "tenant",
    "dead_letters": "tenant",
    "dead_letters_replay": "tenant",
    "dead_letters_replay_all": "tenant",  # replays the caller's dead letters only (tests/operations)
    "operation_list": "tenant",
    "api_keys": "tenant",
    "api_key_create": "tenant",
    "signing_secret": "tenant",
    "signing_secret_rotate": "tenant",
    "job_detail": "job",
    "job_edit": "job",
    "job_pause": "job",
    "job_resume": "job",
    "job_trigger": "job",
    "job_delete": "job",
    "run_detail": "run",
    "run_attempts": "run",
    "run_replay": "run",
    "api_key_revoke": "key",
    "archive_list": "tenant",
    "archive_download": "archive",
    "operation_detail": "operation",
}
KWARG = {"job": "job_id", "run": "run_id", "key": "key_id", "archive": "archive_id", "operation": "operation_id"}
POST_ONLY = {"job_pause", "job_resume", "job_trigger", "run_replay", "api_key_revoke"}


def test_every_route_is_classified():
    from django.urls import get_resolver

    names = {pattern.name for pattern in get_resolver("apps.dashboard.urls").url_patterns}
    assert names == set(ROUTES)


def object_paths(ids):
    """(route name, path) of every route that takes an object id, with tenant B's ids."""
    return [
        (name, reverse(f"dashboard:{name}", kwargs={KWARG[kind]: ids[kind]}))
        for name, kind in ROUTES.items()
        if kind in KWARG
    ]


def test_another_tenants_objects_are_404_on_every_page_and_partial(owner_client, other_objects):
    for name, path in object_paths(other_objects):
        expected = 405 if name in POST_ONLY else 404  # POST-only routes refuse GET before any lookup
        assert owner_client.get(path).status_code == expected, path
        assert owner_client.get(path, **HTMX).status_code == expected, path


def test_another_tenants_objects_cannot_be_changed(owner_client, other_objects, other_job, other_failed_run):
    for _, path in object_paths(other_objects):
        assert owner_client.post(path).status_code == 404, path
        assert owner_client.post(path, **HTMX).status_code == 404, path
    other_job.refresh_from_db()
    other_failed_run.refresh_from_db()
    assert other_job.status == JobStatus.ACTIVE
    assert other_failed_run.status == RunStatus.FAILED
    assert JobRun.objects.filter(definition=other_job).count() == 1  # no trigger went through
    assert ApiKey.objects.get(pk=other_objects["key"]).is_active


def test_bulk_replay_ignores_runs_of_another_tenant(owner_client, failed_run, other_failed_run):
    response = owner_client.post(
        "/dead-letters/replay/", {"runs": [failed_run.id, other_failed_run.id], "confirmed": "1"}
    )
    assert response.status_code == 302
    failed_run.refresh_from_db()
    other_failed_run.refresh_from_db()
    assert failed_run.status == RunStatus.SCHEDULED
    assert other_failed_run.status == RunStatus.FAILED


def test_lists_show_nothing_of_another_tenant(owner_client, job, failed_run, other_objects, other_tenant):
    make_run(job)
    pages = ["/", "/jobs/", "/runs/", "/dead-letters/", "/keys/", "/archives/", "/operations/"]
    pages.append(f"/runs/?job={other_objects['job']}")
    for path in pages:
        html = owner_client.get(path).content.decode()
        assert "globex" not in html.lower(), path
        assert str(other_objects["run"]) not in html, path
        assert str(other_objects["operation"]) not in html, path
    assert "nightly-report" in owner_client.get("/jobs/").content.decode()
    assert str(failed_run.id) in owner_client.get("/dead-letters/").content.decode()


def test_the_schedule_preview_and_htmx_lists_are_scoped_too(owner_client, other_job):
    html = owner_client.get("/jobs/?q=globex", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="job-table").content.decode()
    assert "globex-secret-job" not in html


def test_a_session_pointing_at_a_foreign_tenant_falls_back_to_the_users_own(owner, other_tenant, job):
    client = logged_in(owner)
    session = client.session
    session["dashboard_tenant_id"] = str(other_tenant.id)
    session.save()
    html = client.get("/jobs/").content.decode()
    assert "nightly-report" in html
    assert "globex" not in html.lower()


def test_switching_tenants_needs_a_membership(owner, tenant, other_tenant, other_job):
    client = logged_in(owner)
    assert client.post("/tenant/", {"tenant": other_tenant.id}).status_code == 404
    Membership.objects.create(user=owner, tenant=other_tenant, role=Role.VIEWER)
    assert client.post("/tenant/", {"tenant": other_tenant.id}).status_code == 302
    html = client.get("/jobs/").content.decode()
    assert "globex-secret-job" in html
    assert "Viewer" in html  # the role in the switched-to tenant, not the owner role of acme
    assert client.post(f"/jobs/{other_job.id}/pause/").status_code == 403


def test_viewer_sees_no_buttons(viewer_client, job, failed_run):
    pages = {
        "/jobs/": ["Pause", "Trigger", "New job"],
        f"/jobs/{job.id}/": ["Trigger now", "Edit", "Delete"],
        "/runs/": [">Replay<"],
        "/dead-letters/": [">Replay<", "Replay selected", "Replay all matching"],
        "/keys/": ["Create key", "Revoke", "Reveal"],
    }
    for path, words in pages.items():
        html = viewer_client.get(path).content.decode()
        for word in words:
            assert word not in html, (path, word)


def test_viewer_posts_are_refused_with_403(viewer_client, job, failed_run, tenant):
    key = api_key_create(tenant=tenant).api_key
    posts = [
        "/jobs/new/",
        f"/jobs/{job.id}/edit/",
        f"/jobs/{job.id}/pause/",
        f"/jobs/{job.id}/resume/",
        f"/jobs/{job.id}/trigger/",
        f"/jobs/{job.id}/delete/",
        f"/runs/{failed_run.id}/replay/",
        "/dead-letters/replay/",
        "/dead-letters/replay-all/",
        "/keys/new/",
        f"/keys/{key.id}/revoke/",
        "/signing-secret/rotate/",
    ]
    for path in posts:
        assert viewer_client.post(path, {"runs": [failed_run.id], "confirmed": "1"}).status_code == 403, path
        assert viewer_client.post(path, **HTMX).status_code == 403, path
    job.refresh_from_db()
    failed_run.refresh_from_db()
    key.refresh_from_db()
    assert job.status == JobStatus.ACTIVE and failed_run.status == RunStatus.FAILED and key.is_active
    assert JobRun.objects.filter(definition=job).count() == 1
    assert not Operation.objects.filter(tenant=tenant).exists()


def test_viewer_cannot_open_the_job_forms(viewer_client, job):
    for path in ("/jobs/new/", f"/jobs/{job.id}/edit/", f"/jobs/{job.id}/delete/"):
        assert viewer_client.get(path).status_code == 403, path


def test_viewer_cannot_reveal_the_signing_secret(viewer_client, tenant):
    response = viewer_client.get("/signing-secret/")
    assert response.status_code == 403
    assert "whsec_" not in response.content.decode()


def test_admins_manage_like_owners(admin_member, job):
    client = logged_in(admin_member)
    assert client.post(f"/jobs/{job.id}/pause/").status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED


def test_a_user_without_tenant_gets_a_page_that_says_so(db):
    from .conftest import make_user

    client = logged_in(make_user("lonely@x.test"))
    response = client.get("/jobs/")
    assert response.status_code == 403
    assert "not in any tenant" in response.content.decode()


def test_csrf_is_enforced_on_posts(owner, job):
    client = logged_in(owner, enforce_csrf_checks=True)
    assert client.post(f"/jobs/{job.id}/trigger/").status_code == 403
    assert client.post(f"/jobs/{job.id}/trigger/", HTTP_HX_REQUEST="true").status_code == 403
    assert JobRun.objects.filter(definition=job).count() == 0
    page = client.get("/jobs/")
    token = page.cookies["csrftoken"].value
    assert 'hx-headers=\'{"X-CSRFToken": "' in page.content.decode()  # HTMX sends it from <body>
    response = client.post(f"/jobs/{job.id}/trigger/", HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200
    assert JobRun.objects.filter(definition=job).count() == 1


def test_csrf_is_enforced_on_login_and_signup(db):
    client = Client(enforce_csrf_checks=True)
    assert client.post("/login/", {"username": "x", "password": "y"}).status_code == 403
    assert client.post("/signup/", {"email": "a@b.test", "password": "pw", "tenant_name": "x"}).status_code == 403
