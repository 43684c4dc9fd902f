from rest_framework import status
from rest_framework.response import Response

from apps.jobs import selectors, services

from ..serializers.jobs import JobDetailSerializer, JobInputSerializer, JobSerializer
from .base import TenantViewSet


class JobViewSet(TenantViewSet):
    def list(self, request):
        jobs = selectors.job_list(tenant=self.tenant)[:100]
        return Response({"results": JobSerializer(jobs, many=True).data, "next": None})

    def create(self, request):
        serializer = JobInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = services.job_create(tenant=self.tenant, **serializer.to_model_fields())
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request, pk=None):
        job = selectors.job_get(tenant=self.tenant, job_id=pk)
        recent = selectors.job_recent_runs(job=job)
        return Response(JobDetailSerializer(job, context={"recent_runs": recent}).data)
