from rest_framework import serializers

from apps.jobs.models import JobRun, RunAttempt

from ..fields import UTCDateTimeField


class AttemptSerializer(serializers.ModelSerializer):
    started_at = UTCDateTimeField()
    finished_at = UTCDateTimeField()

    class Meta:
        model = RunAttempt
        fields = ["number", "started_at", "finished_at", "status_code", "error", "error_kind", "duration_ms"]


class RunSerializer(serializers.ModelSerializer):
    id = serializers.CharField(read_only=True)
    job_id = serializers.CharField(source="definition_id", read_only=True)
    scheduled_for = UTCDateTimeField()
    created_at = UTCDateTimeField()
    finished_at = UTCDateTimeField()
    status_reason = serializers.SerializerMethodField()

    class Meta:
        model = JobRun
        fields = [
            "id",
            "job_id",
            "status",
            "status_reason",
            "trigger",
            "scheduled_for",
            "attempt_count",
            "created_at",
            "finished_at",
        ]

    def get_status_reason(self, run: JobRun) -> str | None:
        return run.status_reason or None


class RunDetailSerializer(RunSerializer):
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "attempts"]
