from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.jobs import selectors, services
from apps.jobs.models import JobRun

from ..pagination import IdCursorPagination
from ..schema import ERRORS
from ..serializers.runs import RunDetailSerializer, RunFilterSerializer, RunQuerySerializer, RunSerializer
from ..serializers.shared import shared, shown
from .base import TenantViewSet
from .jobs import conflict

ReplayedSerializer = inline_serializer("Replayed", {"replayed": serializers.IntegerField()})
RUN_FILTERS = [
    OpenApiParameter("job", OpenApiTypes.UUID, description="A job id"),
    OpenApiParameter(
        "status", enum=["scheduled", "queued", "running", "retrying", "succeeded", "failed", "cancelled", "skipped"]
    ),
    OpenApiParameter("scheduled_after", OpenApiTypes.DATETIME, description="ISO 8601 with offset; inclusive"),
    OpenApiParameter("scheduled_before", OpenApiTypes.DATETIME, description="ISO 8601 with offset; exclusive"),
]


class RunViewSet(TenantViewSet):
    pagination_class = IdCursorPagination
    queryset = JobRun.objects.none()
    serializer_class = RunSerializer

    def run(self):
        return selectors.run_get(tenant=self.tenant, run_id=self.object_id())

    @extend_schema(
        summary="List runs",
        description="The tenant's runs, newest first, paginated. `status=failed` is the dead-letter queue.",
        parameters=RUN_FILTERS,
        responses={200: RunSerializer(many=True), **ERRORS},
    )
    def list(self, request):
        filters = RunQuerySerializer(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        page = self.paginate_queryset(filters.apply(selectors.run_list(tenant=self.tenant)))
        return self.get_paginated_response(shown(RunSerializer, page))

    @extend_schema(
        summary="Get a run",
        description="The run with every delivery attempt (request headers with secrets redacted).",
        responses={200: RunDetailSerializer, **ERRORS},
    )
    def retrieve(self, request, pk=None):
        return Response(RunDetailSerializer(self.run()).data)

    @extend_schema(
        summary="Cancel a run",
        description="A run that has not finished becomes `cancelled`; a request already in flight completes but "
        "does not overwrite it. 409 for a finished run.",
        request=None,
        responses={200: RunSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        try:
            run = services.run_cancel(run=self.run())
        except services.JobActionError as error:
            return conflict(error)
        return Response(shared(RunSerializer).to_representation(run))

    @extend_schema(
        summary="Replay a failed run",
        description="Delivers a `failed` run again: the same run and `webhook-id`, a fresh retry budget. "
        "409 for a run that is not failed.",
        request=None,
        responses={202: RunSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"])
    def replay(self, request, pk=None):
        try:
            run = services.run_replay(run=self.run())
        except services.JobActionError as error:
            return conflict(error)
        return Response(shared(RunSerializer).to_representation(run), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="runs_replay_many",
        summary="Replay failed runs",
        description="Replays every failed run matching the filter (the dead-letter queue, or a slice of it); "
        "returns how many.",
        request=RunFilterSerializer,
        responses={202: ReplayedSerializer, **ERRORS},
    )
    @action(detail=False, methods=["post"], url_path="replay")
    def replay_many(self, request):
        """Replay every failed run matching the filter (the dead-letter queue, or a slice of it)."""
        filters = RunFilterSerializer(data=request.data)
        filters.is_valid(raise_exception=True)
        replayed = services.runs_replay_failed(runs=filters.apply(selectors.run_list(tenant=self.tenant)))
        return Response({"replayed": replayed}, status=status.HTTP_202_ACCEPTED)
