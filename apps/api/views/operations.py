"""Bulk operations: one POST per kind answers 202 with the operation; GET follows its progress."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from apps.jobs.models import JobDefinition, ScheduleType
from apps.operations import selectors, services
from apps.operations.models import Operation, OperationKind

from ..pagination import IdCursorPagination
from ..schema import ERRORS
from ..serializers.operations import (
    BackfillOperationInputSerializer,
    ExportOperationInputSerializer,
    OperationSerializer,
    PruneOperationInputSerializer,
    ReplayOperationInputSerializer,
)
from .base import TenantViewSet, reject_unknown_params
from .jobs import IDEMPOTENCY_KEY, respond_idempotently

STARTED = "Answers 202 at once; the `ops` worker does the work in chunks (GET /operations/{id} for its "
"progress). Honours `Idempotency-Key` (the same key and body return the same operation)."


class OperationViewSet(TenantViewSet):
    pagination_class = IdCursorPagination
    queryset = Operation.objects.none()
    serializer_class = OperationSerializer

    def created_by(self) -> str:
        return f"api-key:{self.request.user.api_key.prefix}"

    def start(self, kind: str, serializer_class, check=None) -> Response:
        def produce():
            serializer = serializer_class(data=self.request.data)
            serializer.is_valid(raise_exception=True)
            if check:
                check(serializer.validated_data)
            operation = services.operation_start(
                tenant=self.tenant,
                kind=kind,
                params=serializer.to_params(),
                created_by=self.created_by(),
                idempotency_key=self.request.headers.get("Idempotency-Key", ""),
            )
            body = OperationSerializer(selectors.operation_get(tenant=self.tenant, operation_id=operation.pk)).data
            return status.HTTP_202_ACCEPTED, body

        return respond_idempotently(self.request, self.tenant, produce)

    @extend_schema(
        summary="List operations",
        description="The tenant's bulk operations, newest first, paginated (`{results, next}`).",
        responses={200: OperationSerializer(many=True), **ERRORS},
    )
    def list(self, request):
        reject_unknown_params(request, {"cursor", "limit"})
        page = self.paginate_queryset(selectors.operation_list(tenant=self.tenant))
        return self.get_paginated_response(OperationSerializer(selectors.with_tasks(page), many=True).data)

    @extend_schema(
        summary="Get an operation",
        description="Its state (`pending`, `running`, `succeeded`, `failed`: Celery's, stored by "
        "django-celery-results), `progress` {done, total}, `result` once succeeded, `error` once failed.",
        responses={200: OperationSerializer, **ERRORS},
    )
    def retrieve(self, request, pk=None):
        return Response(
            OperationSerializer(selectors.operation_get(tenant=self.tenant, operation_id=self.object_id())).data
        )

    @extend_schema(
        operation_id="operations_replay",
        summary="Replay dead letters in bulk",
        description="Replays every failed run matching the filter (any number: 100,000 is fine), as "
        "POST /runs/replay does for a few. " + STARTED,
        request=ReplayOperationInputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={202: OperationSerializer, **ERRORS},
    )
    @action(detail=False, methods=["post"])
    def replay(self, request):
        return self.start(OperationKind.REPLAY, ReplayOperationInputSerializer)

    @extend_schema(
        operation_id="operations_backfill",
        summary="Backfill a long range",
        description="A run for every occurrence of the cron job in `(start, end]`, as POST /jobs/{id}/backfill "
        "does, but for ranges up to the tenant's `max_backfill_runs` in chunks. " + STARTED,
        request=BackfillOperationInputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={202: OperationSerializer, **ERRORS},
    )
    @action(detail=False, methods=["post"])
    def backfill(self, request):
        def check(data):
            job = JobDefinition.objects.filter(tenant=self.tenant, pk=data["job"]).first()
            if job is None:
                raise ValidationError({"job": ["No such job."]})
            if job.schedule_type != ScheduleType.CRON:
                raise ValidationError({"job": ["Backfill needs a cron schedule."]})
            services.backfill_occurrences(job, data["start"], data["end"])  # 400 on `end` over the quota

        return self.start(OperationKind.BACKFILL, BackfillOperationInputSerializer, check)

    @extend_schema(
        operation_id="operations_export",
        summary="Export a date range of run history",
        description="Archives every run created in `[start, end)` with its attempts (gzip JSON lines per UTC "
        "day, kind `export`, in the run archive storage) without deleting anything. " + STARTED,
        request=ExportOperationInputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={202: OperationSerializer, **ERRORS},
    )
    @action(detail=False, methods=["post"])
    def export(self, request):
        return self.start(OperationKind.EXPORT, ExportOperationInputSerializer)

    @extend_schema(
        operation_id="operations_prune",
        summary="Prune run history now",
        description="Runs the tenant's retention pass now instead of at the next scheduled one: runs past "
        "the retention are archived, then deleted (docs/architecture.md#run-history-and-retention). " + STARTED,
        request=PruneOperationInputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={202: OperationSerializer, **ERRORS},
    )
    @action(detail=False, methods=["post"])
    def prune(self, request):
        return self.start(OperationKind.PRUNE, PruneOperationInputSerializer)
