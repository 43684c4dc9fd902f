from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.jobs.models import JobRun, RunAttempt, RunStatus
from apps.jobs.secrets import redact_headers

from ..fields import StrictCharField, StrictSerializer, StrictUUIDField, UTCDateTimeField


class AttemptSerializer(serializers.ModelSerializer):
    started_at = UTCDateTimeField()
    finished_at = UTCDateTimeField(allow_null=True, help_text="null while the attempt is in flight")
    request_headers = serializers.SerializerMethodField()

    class Meta:
        model = RunAttempt
        fields = [
            "number",
            "started_at",
            "finished_at",
            "status_code",
            "error",
            "error_kind",
            "duration_ms",
            "response_excerpt",
            "request_headers",
        ]

    @extend_schema_field(serializers.DictField(child=serializers.CharField()))
    def get_request_headers(self, attempt: RunAttempt) -> dict:
        """As sent (RunAttempt.sent_headers); stored redacted already (apps/delivery/outcomes.py),
        redacted again by name in case."""
        return redact_headers(attempt.sent_headers)


# Inline, not a $ref: in OpenAPI 3.0 `nullable` next to `allOf: [$ref]` does not make the referenced
# object nullable for a strict validator (openapi-core) or a generated client.
COALESCED_SCHEMA = {
    "type": "object",
    "nullable": True,
    "description": "For a run that stands for several missed occurrences (misfire policy coalesce); else null.",
    "properties": {
        "count": {"type": "integer", "nullable": True, "description": "How many occurrences it stands for"},
        "first": {"type": "string", "format": "date-time"},
        "last": {"type": "string", "format": "date-time", "nullable": True},
    },
    "required": ["count", "first", "last"],
}


class RunSerializer(serializers.ModelSerializer):
    id = serializers.CharField(read_only=True)
    job_id = serializers.CharField(source="definition_id", read_only=True)
    scheduled_for = UTCDateTimeField()
    created_at = UTCDateTimeField()
    finished_at = UTCDateTimeField(allow_null=True, help_text="null until the run ends")
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
            "coalesced",
        ]

    coalesced = serializers.SerializerMethodField()

    @extend_schema_field(
        {"type": "string", "nullable": True, "description": "Why the run is in its status; null if plain"}
    )
    def get_status_reason(self, run: JobRun) -> str | None:
        return run.status_reason or None

    @extend_schema_field(COALESCED_SCHEMA)
    def get_coalesced(self, run: JobRun) -> dict | None:
        """For a run that stands for several occurrences: how many, the first and the last."""
        if run.coalesced_first_at is None:
            return None
        when = UTCDateTimeField().to_representation
        return {
            "count": run.coalesced_count,
            "first": when(run.coalesced_first_at),
            "last": when(run.coalesced_last_at),
        }


class RunDetailSerializer(RunSerializer):
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "attempts"]


class RunFilterSerializer(StrictSerializer):
    """Which runs: of one job, in one status, scheduled in a time range; every given filter applies."""

    # The body of POST /runs/replay, and (with the pagination parameters) the query of GET /runs.

    job = StrictUUIDField(required=False)
    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
    scheduled_after = UTCDateTimeField(required=False)
    scheduled_before = UTCDateTimeField(required=False)

    def apply(self, runs):
        data = self.validated_data
        if "job" in data:
            runs = runs.filter(definition_id=data["job"])
        if "status" in data:
            runs = runs.filter(status=data["status"])
        if "scheduled_after" in data:
            runs = runs.filter(scheduled_for__gte=data["scheduled_after"])
        if "scheduled_before" in data:
            runs = runs.filter(scheduled_for__lt=data["scheduled_before"])
        return runs


class RunQuerySerializer(RunFilterSerializer):
    cursor = StrictCharField(required=False, allow_blank=True)  # blank: the first page, as on every list
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200)
