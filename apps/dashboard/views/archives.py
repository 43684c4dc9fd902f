"""Run archives: the tenant's archive files (pruned history and exports) with download links."""

from django.conf import settings
from django.http import FileResponse, Http404
from django.shortcuts import render

from apps.history import selectors
from apps.tenants.quotas import effective_limits

from ..access import member_required
from .common import page_of, query_without_page


@member_required
def archive_list(request):
    archives = selectors.archive_list(tenant=request.tenant).order_by("-id")
    context = {
        "page": page_of(request, archives),
        "query": query_without_page(request),
        "retention_days": effective_limits(request.tenant).run_retention_days,
        "dead_letter_days": settings.CHIME_DEAD_LETTER_RETENTION_DAYS,
    }
    return render(request, "dashboard/archives/list.html", context)


@member_required
def archive_download(request, archive_id):
    """Streams the file; another tenant's archive is a 404 like a missing one."""
    archive = selectors.archive_get(tenant=request.tenant, archive_id=archive_id)
    try:
        stream = selectors.archive_file(archive)
    except FileNotFoundError as error:
        raise Http404("The archive file is missing from the archive storage.") from error
    return FileResponse(
        stream, as_attachment=True, filename=selectors.download_name(archive), content_type="application/gzip"
    )
