from django.db import transaction
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from apps.jobs import selectors, services
from apps.jobs.models import JobStatus

from ..errors import error_response
from ..pagination import IdCursorPagination
from ..serializers.jobs import BackfillSerializer, JobDetailSerializer, JobInputSerializer, JobSerializer
from ..serializers.runs import RunSerializer
from .base import TenantViewSet

JOB_STATUS_FILTERS = {JobStatus.ACTIVE, JobStatus.PAUSED, JobStatus.COMPLETED}


def conflict(error: services.JobActionError) -> Response:
    return error_response("conflict", str(error), status.HTTP_409_CONFLICT)


class JobViewSet(TenantViewSet):
    pagination_class = IdCursorPagination

    def job(self):
        return selectors.job_get(tenant=self.tenant, job_id=self.kwargs["pk"])

    def detail_response(self, job) -> Response:
        recent = selectors.job_recent_runs(job=job)
        return Response(JobDetailSerializer(job, context={"recent_runs": recent}).data)

    def list(self, request):
        jobs = selectors.job_list(tenant=self.tenant)
        wanted = request.query_params.get("status")
        if wanted:
            if wanted not in JOB_STATUS_FILTERS:
                raise ValidationError({"status": [f"One of: {', '.join(sorted(JOB_STATUS_FILTERS))}."]})
            jobs = jobs.filter(status=wanted)
        page = self.paginate_queryset(jobs)
        return self.get_paginated_response(JobSerializer(page, many=True).data)

    def create(self, request):
        serializer = JobInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = services.job_create(tenant=self.tenant, **serializer.to_model_fields())
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request, pk=None):
        return self.detail_response(self.job())

    def destroy(self, request, pk=None):
        services.job_delete(job=self.job())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        try:
            return self.detail_response(services.job_pause(job=self.job()))
        except services.JobActionError as error:
            return conflict(error)

    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        try:
            return self.detail_response(services.job_resume(job=self.job()))
        except services.JobActionError as error:
            return conflict(error)

    @action(detail=True, methods=["post"])
    def trigger(self, request, pk=None):
        try:
            run = services.job_trigger(job=self.job())
        except services.JobActionError as error:
            return conflict(error)
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

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

    @action(detail=True, methods=["get"])
    def runs(self, request, pk=None):
        runs = selectors.job_runs(job=self.job())
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(RunSerializer(page, many=True).data)
