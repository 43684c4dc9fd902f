"""`POST /api/v1/jobs/batch` (docs/api.md#batch-create): up to 1,000 jobs of the job contract."""

from rest_framework import serializers

from apps.jobs.batch import MAX_BATCH_JOBS

from ..fields import StrictSerializer
from .jobs import JobInputSerializer, JobSerializer


class JobBatchInputSerializer(StrictSerializer):
    """The jobs to create, all or none (each as in POST /jobs)."""

    # For the schema; the view validates the envelope and then each job on its own, so that an
    # error names its item (`jobs.3.schedule.expression`) and every bad item is reported at once.
    jobs = serializers.ListField(child=JobInputSerializer(), min_length=1, max_length=MAX_BATCH_JOBS)


class JobBatchSerializer(serializers.Serializer):
    """The jobs created, in the order they were sent."""

    jobs = JobSerializer(many=True)
