from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from apps.core.idempotency import MAX_KEY_LENGTH, IdempotencyConflict, idempotent
from apps.jobs import selectors, services
from apps.jobs.models import JobDefinition, JobStatus, Priority
from apps.jobs.targets import NUL

from ..errors import error_response
from ..pagination import IdCursorPagination
from ..schema import ERRORS
from ..serializers.jobs import (
    BackfillSerializer,
    JobDetailSerializer,
    JobInputSerializer,
    JobSerializer,
    job_as_input,
)
from ..serializers.runs import RunSerializer
from .base import TenantViewSet, reject_unknown_params

JOB_STATUS_FILTERS = {JobStatus.ACTIVE, JobStatus.PAUSED, JobStatus.COMPLETED}
BackfillResultSerializer = inline_serializer(
    "BackfillResult",
    {"created": serializers.IntegerField(), "existing": serializers.IntegerField(), "runs": RunSerializer(many=True)},
)


def schedule_error_path(field: str) -> str:
    """A schedule error's field in the job contract: the expression and zone live in `schedule`,
    the DST policy at the top level (`dst_policy.gap`)."""
    if field in ("expression", "timezone", "run_at"):
        return f"schedule.{field}"
    return field


def conflict(error: Exception) -> Response:
    return error_response("conflict", str(error), status.HTTP_409_CONFLICT)


class JobViewSet(TenantViewSet):
    pagination_class = IdCursorPagination
    queryset = JobDefinition.objects.none()
    serializer_class = JobSerializer

    def job(self):
        return selectors.job_get(tenant=self.tenant, job_id=self.object_id())

    def detail_response(self, job) -> Response:
        recent = selectors.job_recent_runs(job=job)
        return Response(JobDetailSerializer(job, context={"recent_runs": recent}).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("status", enum=sorted(JOB_STATUS_FILTERS)),
            OpenApiParameter("priority", enum=Priority.values),
            OpenApiParameter("q", description="Case-insensitive substring of the name"),
        ],
        responses={200: JobSerializer(many=True), **ERRORS},
    )
    def list(self, request):
        reject_unknown_params(request, {"status", "priority", "q", "cursor", "limit"})
        jobs = selectors.job_list(tenant=self.tenant)
        params = request.query_params
        if "status" in params:
            if params["status"] not in JOB_STATUS_FILTERS:
                raise ValidationError({"status": [f"One of: {', '.join(sorted(JOB_STATUS_FILTERS))}."]})
            jobs = jobs.filter(status=params["status"])
        if "priority" in params:
            if params["priority"] not in Priority.values:
                raise ValidationError({"priority": [f"One of: {', '.join(Priority.values)}."]})
            jobs = jobs.filter(priority=params["priority"])
        if params.get("q"):  # an empty q filters nothing
            if NUL in params["q"]:  # PostgreSQL cannot compare with it: a 400, not a 500
                raise ValidationError({"q": ["Null characters are not allowed."]})
            jobs = jobs.filter(name__icontains=params["q"])
        page = self.paginate_queryset(jobs)
        return self.get_paginated_response(JobSerializer(page, many=True).data)

    @extend_schema(
        request=JobInputSerializer,
        parameters=[OpenApiParameter("Idempotency-Key", OpenApiTypes.STR, OpenApiParameter.HEADER)],
        responses={201: JobSerializer, **ERRORS},
    )
    def create(self, request):
        def produce():
            serializer = JobInputSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            job = services.job_create(tenant=self.tenant, **serializer.to_model_fields())
            return status.HTTP_201_CREATED, JobSerializer(job).data

        key = request.headers.get("Idempotency-Key")
        if key is None:
            code, body = produce()
            return Response(body, status=code)
        if not key or len(key) > MAX_KEY_LENGTH:
            raise ValidationError({"Idempotency-Key": [f"Must be 1 to {MAX_KEY_LENGTH} characters."]})
        try:
            code, body, replayed = idempotent(tenant=self.tenant, key=key, payload=request.data, produce=produce)
        except IdempotencyConflict as error:
            return conflict(error)
        return Response(body, status=code, headers={"Idempotent-Replayed": "true"} if replayed else None)

    @extend_schema(responses={200: JobDetailSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        return self.detail_response(self.job())

    @extend_schema(request=JobInputSerializer, responses={200: JobDetailSerializer, **ERRORS})
    def partial_update(self, request, pk=None):
        """Change a job. Top-level fields given replace the current ones; a nested object
        (schedule, target, retry, dst_policy) is replaced as a whole."""
        job = self.job()
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
        serializer = JobInputSerializer(data={**job_as_input(job), **request.data}, context={"job": job})
        serializer.is_valid(raise_exception=True)
        try:
            job = services.job_update(job=job, **serializer.to_model_fields())
        except services.InvalidSchedule as error:
            raise ValidationError({schedule_error_path(error.field): [error.message]}) from error
        except services.JobActionError as error:
            return conflict(error)
        return self.detail_response(job)

    @extend_schema(request=None, responses={204: None, **ERRORS})
    def destroy(self, request, pk=None):
        services.job_delete(job=self.job())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: JobDetailSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        try:
            return self.detail_response(services.job_pause(job=self.job()))
        except services.JobActionError as error:
            return conflict(error)

    @extend_schema(request=None, responses={200: JobDetailSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        try:
            return self.detail_response(services.job_resume(job=self.job()))
        except services.InvalidSchedule as error:
            raise ValidationError({schedule_error_path(error.field): [error.message]}) from error
        except services.JobActionError as error:
            return conflict(error)

    @extend_schema(request=None, responses={201: RunSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def trigger(self, request, pk=None):
        try:
            run = services.job_trigger(job=self.job())
        except services.JobActionError as error:
            return conflict(error)
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=BackfillSerializer, responses={201: BackfillResultSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def backfill(self, request, pk=None):
        job = self.job()
        serializer = BackfillSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            with transaction.atomic():
                result = services.job_backfill(job=job, **serializer.validated_data)
        except services.JobActionError as error:
            return conflict(error)
        return Response(
            {
                "created": len(result.created),
                "existing": result.existing,
                "runs": RunSerializer(result.created, many=True).data,
            },
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(responses={200: RunSerializer(many=True), **ERRORS})
    @action(detail=True, methods=["get"])
    def runs(self, request, pk=None):
        reject_unknown_params(request, {"cursor", "limit"})
        runs = selectors.job_runs(job=self.job())
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(RunSerializer(page, many=True).data)
