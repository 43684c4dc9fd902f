"""The pages a production deploy must serve, and a Chromium walk that checks each one loads with
every subresource (no 4xx/5xx, no failed request, no console error)."""

import contextlib
from urllib.parse import urlparse

from django.urls import reverse

# `manage.py shell -c`: the superuser becomes an owner of the tenant (no command does that).
ADD_OWNER = (
    "from django.contrib.auth import get_user_model; "
    "from apps.tenants.models import Membership, Role, Tenant; "
    "Membership.objects.create(user=get_user_model().objects.get(username='{username}'), "
    "tenant=Tenant.objects.get(slug='{slug}'), role=Role.OWNER)"
)

# Pages anyone can open (apps/dashboard/urls.py, the admin's login).
PUBLIC = ["/login/", "/signup/", "/password-reset/", "/password-reset/sent/", "/reset/done/", "/admin/login/"]


def member_pages(*, job_id: str, run_id: str) -> list[str]:
    """Every GET page of apps/dashboard/urls.py for a tenant owner, the admin, and the API docs."""
    return [
        "/",
        "/jobs/",
        "/jobs/new/",
        f"/jobs/{job_id}/",
        f"/jobs/{job_id}/edit/",
        f"/jobs/{job_id}/delete/",
        "/runs/",
        f"/runs/{run_id}/",
        "/dead-letters/",
        "/operations/",
        "/health/",
        "/keys/",
        "/signing-secret/",
        "/preferences/timezone/",
        "/admin/",
        "/admin/jobs/jobdefinition/",
        f"/admin/jobs/jobdefinition/{job_id}/change/",
        "/admin/jobs/jobrun/",
        "/admin/tenants/tenant/",
        "/admin/tenants/apikey/",
        "/admin/operations/operation/",
        "/admin/django_celery_results/taskresult/",
        reverse("api:docs"),
    ]


class Walk:
    """One browser tab visiting pages; records every problem instead of stopping at the first."""

    def __init__(self, context):
        self.page = context.new_page()
        self.problems: list[str] = []
        self.visited: dict[str, int] = {}
        self.assets: dict[str, int] = {}
        self.hashed_assets: set[str] = set()
        self.current = ""
        self.page.on("response", self._response)
        self.page.on("requestfailed", self._failed)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.problems.append(f"{self.current}: page error {error}"))

    def _response(self, response) -> None:
        kind = response.request.resource_type
        if response.status >= 400:
            self.problems.append(f"{self.current}: {kind} {response.url} answered {response.status}")
        if kind in ("stylesheet", "script", "image", "font") and not response.url.startswith("data:"):
            self.assets[urlparse(response.url).path] = response.status
            name = urlparse(response.url).path.rsplit("/", 1)[-1]
            if len(name.split(".")) >= 3:  # dashboard.0123abcd4567.css
                self.hashed_assets.add(name)

    def _failed(self, request) -> None:
        self.problems.append(f"{self.current}: {request.resource_type} {request.url} failed: {request.failure}")

    def _console(self, message) -> None:
        if message.type == "error":
            self.problems.append(f"{self.current}: console error {message.text}")

    def visit(self, path: str) -> None:
        self.current = path
        response = self.page.goto(path, wait_until="load")
        status = response.status if response else 0
        self.visited[path] = status
        final = urlparse(self.page.url).path
        if status != 200 or final != path:
            self.problems.append(f"{path}: answered {status}, ended at {final}")
        if path == reverse("api:docs"):  # Swagger UI renders once its JS ran and the schema loaded
            try:
                self.page.locator(".swagger-ui .opblock").first.wait_for()
            except Exception as error:  # recorded, with whatever else went wrong
                self.problems.append(f"{path}: Swagger UI did not render the schema: {error}")
        with contextlib.suppress(Exception):  # a live page may keep polling; its assets are in
            self.page.wait_for_load_state("networkidle", timeout=5000)

    def log_in(self, username: str, password: str) -> None:
        self.visit("/login/")
        self.current = "log in"
        self.page.locator("input[name=username]").fill(username)
        self.page.locator("input[name=password]").fill(password)
        self.page.get_by_role("button", name="Log in").click()
        self.page.wait_for_url(lambda url: urlparse(url).path == "/")
        self.page.get_by_role("heading", name="Overview").wait_for()

    def summary(self) -> dict:
        unhashed = sorted(path for path in self.assets if path.rsplit("/", 1)[-1] not in self.hashed_assets)
        return {"pages": self.visited, "assets": len(self.assets), "hashed": len(self.hashed_assets), "other": unhashed}
