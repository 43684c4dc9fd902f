"""The dashboard's archives page: the tenant's files with download links, nobody else's."""

import gzip
import json

from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apps.history import services
from apps.history.models import RunArchive
from apps.tenants.models import Membership, Role


def _member_client(tenant, username) -> Client:
    user = get_user_model().objects.create_user(username=username, email=username, password="pw-Chime-2026!")
    Membership.objects.create(user=user, tenant=tenant, role=Role.VIEWER)
    client = Client()
    client.force_login(user)
    return client


def test_archives_page_lists_and_downloads_only_the_tenants_files(tenant, other_tenant, make_runs):
    runs = make_runs(days_old=40, n=2, attempts=1)
    services.prune_tenant(tenant=tenant, now=timezone.now())
    archive = RunArchive.objects.get(tenant=tenant)
    mine, theirs = _member_client(tenant, "v@acme.test"), _member_client(other_tenant, "v@globex.test")

    page = mine.get("/archives/")
    assert page.status_code == 200
    html = page.content.decode()
    link = f"/archives/{archive.id}/download/"
    assert link in html and "30 days" in html
    download = mine.get(link)
    assert download.status_code == 200 and download["Content-Type"] == "application/gzip"
    lines = [json.loads(line) for line in gzip.decompress(b"".join(download.streaming_content)).splitlines()]
    assert {line["id"] for line in lines} == {str(run.id) for run in runs}

    assert link not in theirs.get("/archives/").content.decode()
    assert theirs.get(link).status_code == 404
