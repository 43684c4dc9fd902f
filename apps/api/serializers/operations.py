"""Bulk operations (apps/operations): the kinds' parameters, validated, and the operation as read."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.jobs.models import ErrorKind
from apps.operations.models import OperationKind

from ..fields import StrictSerializer, StrictUUIDField, UTCDateTimeField
from .jobs import BackfillSerializer


class ReplayOperationInputSerializer(StrictSerializer):
    """Which dead letters (runs `failed`): every given filter applies; none, the whole queue."""

    job = StrictUUIDField(required=False, help_text="A job id")
    scheduled_after = UTCDateTimeField(required=False, help_text="Inclusive")
    scheduled_before = UTCDateTimeField(required=False, help_text="Exclusive")
    error_kind = serializers.ChoiceField(
        choices=ErrorKind.choices, required=False, help_text="Of the run's last attempt"
    )
    status_code = serializers.IntegerField(
        required=False, min_value=100, max_value=599, help_text="The HTTP status of the run's last attempt"
    )

    def validate(self, attrs):
        after, before = attrs.get("scheduled_after"), attrs.get("scheduled_before")
        if after and before and before <= after:
            raise serializers.ValidationError({"scheduled_before": ["Must be after scheduled_after."]})
        return attrs

    def to_params(self) -> dict:
        """The operation's `params`, as JSON."""
        return {k: (v.isoformat() if hasattr(v, "isoformat") else str(v) if k == "job" else v)
                for k, v in self.validated_data.items()}  # fmt: skip


class BackfillOperationInputSerializer(BackfillSerializer):
    """POST /jobs/{id}/backfill's body with the job: (start, end], at most max_backfill_runs occurrences."""

    job = StrictUUIDField(help_text="A cron job of the tenant")

    def to_params(self) -> dict:
        data = self.validated_data
        return {"job": str(data["job"]), "start": data["start"].isoformat(), "end": data["end"].isoformat()}


class ExportOperationInputSerializer(StrictSerializer):
    """Runs created in [start, end), whatever their status, archived without being deleted."""

    start = UTCDateTimeField(help_text="Inclusive")
    end = UTCDateTimeField(help_text="Exclusive")

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": ["Must be after start."]})
        return attrs

    def to_params(self) -> dict:
        return {"start": self.validated_data["start"].isoformat(), "end": self.validated_data["end"].isoformat()}


class PruneOperationInputSerializer(StrictSerializer):
    """No parameters: the tenant's retention says what goes (docs/api.md#operations)."""

    def to_params(self) -> dict:
        return {}


class ProgressSerializer(serializers.Serializer):
    done = serializers.IntegerField(help_text="Items done (runs replayed or looked at, occurrences backfilled)")
    total = serializers.IntegerField(allow_null=True, help_text="null until the task counted them")


RESULT_SCHEMA = {
    "type": "object",
    "nullable": True,
    "additionalProperties": {"type": "integer"},
    "description": "The task's result once succeeded, else null: {replayed} for replay, {created, existing} "
    "for backfill, {runs, archives, bytes} for export, {runs, attempts, dead_letters, archives, bytes} for prune",
}


class OperationSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.ChoiceField(choices=OperationKind.choices)
    params = serializers.DictField(help_text="What was asked, as validated")
    state = serializers.ChoiceField(choices=["pending", "running", "succeeded", "failed"])
    progress = serializers.SerializerMethodField()
    result = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    created_by = serializers.CharField()
    created_at = UTCDateTimeField()
    finished_at = UTCDateTimeField(allow_null=True, help_text="null until it ends")

    @extend_schema_field(ProgressSerializer)
    def get_progress(self, view) -> dict:
        return {"done": view.done, "total": view.total}

    @extend_schema_field(RESULT_SCHEMA)
    def get_result(self, view) -> dict | None:
        return view.result

    @extend_schema_field({"type": "string", "nullable": True, "description": "Why it failed; else null"})
    def get_error(self, view) -> str | None:
        return view.error

    def to_representation(self, view):
        data = super().to_representation(view)
        data["id"] = str(view.id)
        return data
