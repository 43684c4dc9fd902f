from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from apps.core.idempotency import MAX_KEY_LENGTH, IdempotencyConflict, idempotent
from apps.jobs import batch, selectors, services
from apps.jobs.models import JobDefinition, JobStatus, Priority
from apps.jobs.targets import NUL
from apps.tenants import quotas

from ..errors import QUOTA_FIELDS, error_response, flatten_errors
from ..pagination import IdCursorPagination
from ..parsers import BatchJSONParser
from ..schema import ERRORS, NO_NUL_PATTERN
from ..serializers.batch import JobBatchInputSerializer, JobBatchSerializer
from ..serializers.jobs import (
    BackfillSerializer,
    JobDetailSerializer,
    JobInputSerializer,
    JobSerializer,
    job_as_input,
    job_model_fields,
)
from ..serializers.runs import RunSerializer
from ..serializers.shared import shared, shown, validated
from .base import TenantViewSet, reject_unknown_params

JOB_STATUS_FILTERS = {JobStatus.ACTIVE, JobStatus.PAUSED, JobStatus.COMPLETED}
BackfillResultSerializer = inline_serializer(
    "BackfillResult",
    {"created": serializers.IntegerField(), "existing": serializers.IntegerField(), "runs": RunSerializer(many=True)},
)


def _item_order(path: str) -> tuple[int, str]:
    """`jobs.10.name` after `jobs.9.name`: errors listed in item order."""
    index, _, rest = path.removeprefix("jobs.").partition(".")
    return int(index), rest


def schedule_error_path(field: str) -> str:
    """A schedule error's field in the job contract: the expression and zone live in `schedule`,
    the DST policy at the top level (`dst_policy.gap`)."""
    if field in ("expression", "timezone", "run_at"):
        return f"schedule.{field}"
    return field


def conflict(error: Exception) -> Response:
    return error_response("conflict", str(error), status.HTTP_409_CONFLICT)


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH},
    OpenApiParameter.HEADER,
    description="The same key and body within 24 h return the first response instead of creating again.",
)


def respond_idempotently(request, tenant, produce) -> Response:
    """`produce()` -> (status, body), once per Idempotency-Key and body (apps/core/idempotency.py)."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        code, body = produce()
        return Response(body, status=code)
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValidationError({"Idempotency-Key": [f"Must be 1 to {MAX_KEY_LENGTH} characters."]})
    try:
        code, body, replayed = idempotent(tenant=tenant, key=key, payload=request.data, produce=produce)
    except IdempotencyConflict as error:
        return conflict(error)
    return Response(body, status=code, headers={"Idempotent-Replayed": "true"} if replayed else None)


def batch_envelope(data) -> list:
    """The `jobs` list of a batch body, or a 400 on `jobs` (the items are validated one by one)."""
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    unknown = sorted(set(data) - {"jobs"})
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in unknown})
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        problem = "This field is required: a list of jobs." if jobs is None else "Expected a list of jobs."
        raise ValidationError({"jobs": [problem]})
    if not jobs:
        raise ValidationError({"jobs": ["A batch holds at least one job."]})
    if len(jobs) > batch.MAX_BATCH_JOBS:
        raise ValidationError(
            {"jobs": [f"A batch holds at most {batch.MAX_BATCH_JOBS} jobs; this one has {len(jobs)}: split it."]}
        )
    return jobs


def batch_item_field(error: Exception) -> str:
    if isinstance(error, services.InvalidSchedule):
        return schedule_error_path(error.field)
    return QUOTA_FIELDS.get(error.field, error.field)


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
        summary="List jobs",
        description="The tenant's jobs, newest first, paginated (`{results, next}`). Filters combine; "
        "an unknown query parameter is a 400.",
        parameters=[
            OpenApiParameter("status", enum=sorted(JOB_STATUS_FILTERS)),
            OpenApiParameter("priority", enum=Priority.values),
            OpenApiParameter(
                "q", {"type": "string", "pattern": NO_NUL_PATTERN}, description="Case-insensitive substring of the name"
            ),
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
        return self.get_paginated_response(shown(JobSerializer, page))

    @extend_schema(
        summary="Create a job",
        description="A cron or one-off job delivering a webhook. With `Idempotency-Key`, the same key and body "
        "within 24 h return the first response (`Idempotent-Replayed: true`); the same key with another body "
        "is a 409. See docs/api.md#jobs for each field.",
        request=JobInputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: JobSerializer, **ERRORS},
    )
    def create(self, request):
        def produce():
            # The process's serializers, their fields built once (apps/api/serializers/shared.py).
            fields = job_model_fields(validated(JobInputSerializer, request.data))
            try:
                job = services.job_create(tenant=self.tenant, **fields)
            except services.InvalidSchedule as error:
                raise ValidationError({schedule_error_path(error.field): [error.message]}) from error
            return status.HTTP_201_CREATED, shared(JobSerializer).to_representation(job)

        return respond_idempotently(request, self.tenant, produce)

    @extend_schema(
        summary="Create many jobs",
        description=f"1 to {batch.MAX_BATCH_JOBS} jobs of the POST /jobs contract, created all or none, in "
        "one transaction. A 400 names every bad item's fields as `jobs.<index>.<field>`; a batch that "
        "would take the tenant past `max_jobs` is refused whole (403). Counts against the API rate "
        f"limit as one request per {batch.JOBS_PER_API_REQUEST} jobs (rounded up). Honours `Idempotency-Key`. "
        "See docs/api.md#batch-create.",
        request=JobBatchInputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: JobBatchSerializer, **ERRORS},
    )
    @action(detail=False, methods=["post"], url_path="batch", parser_classes=[BatchJSONParser])
    def batch(self, request):
        items = batch_envelope(request.data)
        # The throttle class took one request before the body was read; the rest of the weight now.
        weight = batch.api_request_weight(len(items))
        if weight > 1:
            quotas.take_api_request(self.tenant, weight=weight - 1)

        def produce():
            fields, errors = [], {}
            # One serializer for every item, as DRF's ListField does: building a serializer's
            # fields (a deep copy of the nested declared fields) was 40 % of a batch job's CPU.
            validator = shared(JobInputSerializer)
            for index, item in enumerate(items):
                try:
                    checked = validator.run_validation(item)
                except ValidationError as error:
                    errors.update(flatten_errors(error.detail, f"jobs.{index}"))
                else:
                    fields.append((index, job_model_fields(checked)))
            valid = [f for _, f in fields]
            if errors:  # the other items' own problems too, so that one 400 lists them all
                problems = batch.batch_item_errors(tenant=self.tenant, items=valid)
            else:
                try:
                    jobs = batch.jobs_create_batch(tenant=self.tenant, items=valid)
                except batch.BatchInvalid as invalid:
                    problems = invalid.errors
                else:
                    return status.HTTP_201_CREATED, {"jobs": shown(JobSerializer, jobs)}
            for position, found in problems.items():
                for problem in found:
                    path = f"jobs.{fields[position][0]}.{batch_item_field(problem)}"
                    errors.setdefault(path, []).append(problem.message)
            raise ValidationError(dict(sorted(errors.items(), key=lambda item: _item_order(item[0]))))

        return respond_idempotently(request, self.tenant, produce)

    @extend_schema(
        summary="Get a job",
        description="The job with its 20 most recent runs (`recent_runs`, newest first).",
        responses={200: JobDetailSerializer, **ERRORS},
    )
    def retrieve(self, request, pk=None):
        return self.detail_response(self.job())

    @extend_schema(
        summary="Change a job",
        description="Only the fields sent change; the others keep their stored values. A nested object "
        "(`schedule`, `target`, `retry`, `dst_policy`) is replaced as a whole. A schedule change recomputes "
        "`next_fire_at` and cancels runs not started yet; `enabled` pauses or resumes.",
        request=JobInputSerializer,
        responses={200: JobDetailSerializer, **ERRORS},
    )
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

    @extend_schema(
        summary="Delete a job",
        description="Stops the job for good; runs not started yet are cancelled. Its runs stay readable under /runs.",
        request=None,
        responses={204: None, **ERRORS},
    )
    def destroy(self, request, pk=None):
        services.job_delete(job=self.job())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Pause a job",
        description="No run is made while paused; occurrences in the pause are handled by the misfire policy "
        "on resume. 409 if the job cannot be paused (deleted or completed).",
        request=None,
        responses={200: JobDetailSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        try:
            return self.detail_response(services.job_pause(job=self.job()))
        except services.JobActionError as error:
            return conflict(error)

    @extend_schema(
        summary="Resume a job",
        description="Applies the misfire policy to the occurrences missed while paused and resets the circuit "
        "breaker. A stored schedule that cannot be evaluated is a 400 on its field.",
        request=None,
        responses={200: JobDetailSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        try:
            return self.detail_response(services.job_resume(job=self.job()))
        except services.InvalidSchedule as error:
            raise ValidationError({schedule_error_path(error.field): [error.message]}) from error
        except services.JobActionError as error:
            return conflict(error)

    @extend_schema(
        summary="Trigger a run now",
        description="A run outside the schedule (`trigger: manual`), delivered at once, even when the job is "
        "paused. Counts against the tenant's `triggers_per_minute` (429 over it).",
        request=None,
        responses={201: RunSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"])
    def trigger(self, request, pk=None):
        try:
            run = services.job_trigger(job=self.job())
        except services.JobActionError as error:
            return conflict(error)
        return Response(shared(RunSerializer).to_representation(run), status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Backfill past occurrences",
        description="A run for every occurrence of the schedule in `(start, end]` (the past only, at most "
        "`max_backfill_runs`); occurrences that have a run already are kept and counted in `existing`. "
        "Refused with 409 while the job is paused: resume it first.",
        request=BackfillSerializer,
        responses={201: BackfillResultSerializer, **ERRORS},
    )
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
                "runs": shown(RunSerializer, result.created),
            },
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        summary="List a job's runs",
        description="Every run of the job, newest first: delivered, skipped or cancelled, each with `status_reason`.",
        responses={200: RunSerializer(many=True), **ERRORS},
    )
    @action(detail=True, methods=["get"])
    def runs(self, request, pk=None):
        reject_unknown_params(request, {"cursor", "limit"})
        runs = selectors.job_runs(job=self.job())
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(shown(RunSerializer, page))
