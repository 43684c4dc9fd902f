"""Run archives: list the tenant's files and stream one (docs/api.md#run-archives)."""

from django.http import FileResponse, Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.decorators import action

from apps.history import selectors
from apps.history.models import ArchiveKind, RunArchive

from ..pagination import IdCursorPagination
from ..schema import ERRORS
from ..serializers.archives import ArchiveSerializer
from .base import TenantViewSet, reject_unknown_params

# The download's type for the API: octet-stream, which every generated client reads as a file
# (openapi-python-client cannot parse application/gzip); the name says .jsonl.gz.
FILE_TYPE = "application/octet-stream"


class ArchiveViewSet(TenantViewSet):
    pagination_class = IdCursorPagination
    queryset = RunArchive.objects.none()
    serializer_class = ArchiveSerializer

    @extend_schema(
        summary="List run archives",
        description="The tenant's archive files, newest first: runs that left the run history after its "
        "retention (`kind=prune`) and exports (`kind=export`). Each is gzip-compressed JSON lines, one run with "
        "its attempts a line. Paginated like every list.",
        parameters=[OpenApiParameter("kind", enum=ArchiveKind.values)],
        responses={200: ArchiveSerializer(many=True), **ERRORS},
    )
    def list(self, request):
        reject_unknown_params(request, {"cursor", "limit", "kind"})
        kind = request.query_params.get("kind")
        if kind is not None and kind not in ArchiveKind.values:
            raise exceptions.ValidationError({"kind": [f"One of: {', '.join(ArchiveKind.values)}."]})
        page = self.paginate_queryset(selectors.archive_list(tenant=self.tenant, kind=kind))
        return self.get_paginated_response(ArchiveSerializer(page, many=True).data)

    @extend_schema(
        operation_id="archives_download",
        summary="Download a run archive",
        description="The archive file itself, streamed: gzip-compressed JSON lines (one run, with its "
        "`attempts`, a line). 404 for an archive of another tenant.",
        responses={
            (200, FILE_TYPE): OpenApiResponse(OpenApiTypes.BINARY, description="gzip-compressed JSON lines"),
            **ERRORS,
        },
    )
    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        archive = self._archive()
        try:
            stream = selectors.archive_file(archive)
        except FileNotFoundError:
            raise exceptions.NotFound("The archive file is missing from the archive storage.") from None
        response = FileResponse(
            stream, as_attachment=True, filename=selectors.download_name(archive), content_type=FILE_TYPE
        )
        response["Content-Length"] = str(archive.bytes)
        return response

    def _archive(self) -> RunArchive:
        try:
            return selectors.archive_get(tenant=self.tenant, archive_id=self.object_id())
        except Http404:
            raise exceptions.NotFound("No such archive.") from None
