"""Reads of the archive index, always through the tenant (a tenant never sees another's files)."""

from django.http import Http404

from .models import RunArchive


def archive_list(*, tenant, kind: str | None = None):
    archives = RunArchive.objects.for_tenant(tenant)
    return archives.filter(kind=kind) if kind else archives


def archive_get(*, tenant, archive_id) -> RunArchive:
    """The tenant's archive, or Http404 (another tenant's id is not found, not forbidden)."""
    archive = RunArchive.objects.for_tenant(tenant).filter(pk=archive_id).first()
    if archive is None:
        raise Http404("No such archive.")
    return archive


def archive_file(archive: RunArchive):
    """The open file (binary) in the archive storage, for streaming to the client."""
    from .archive import archive_storage

    return archive_storage().open(archive.path, "rb")


def download_name(archive: RunArchive) -> str:
    return f"chime-{archive.kind}-{archive.day:%Y-%m-%d}-part{archive.part}.jsonl.gz"
