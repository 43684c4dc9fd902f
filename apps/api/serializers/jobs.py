"""The v1 job contract (docs/api.md). Input is validated here; writes go through apps.jobs.services."""

from django.conf import settings
from django.utils import timezone
from rest_framework import serializers

from apps.delivery.safety import InvalidTarget, UnsafeTarget, check_url
from apps.jobs.models import (
    ConcurrencyPolicy,
    DstGap,
    DstOverlap,
    JobDefinition,
    MisfirePolicy,
    Priority,
    ScheduleType,
)
from apps.jobs.schedules import MAX_PREVIEW_COUNT, CronSchedule, DstPolicy, ScheduleError

from ..fields import StrictSerializer, UTCDateTimeField
from .runs import RunSerializer

HTTP_METHODS = ["POST", "PUT", "PATCH", "DELETE", "GET"]
# Set by Chime on every delivery; a job may not override them.
RESERVED_HEADERS = {
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "idempotency-key",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "chime-attempt",
    "chime-scheduled-for",
    "chime-job-id",
    "chime-run-id",
}


class ScheduleSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=ScheduleType.choices)
    expression = serializers.CharField(required=False, max_length=120, trim_whitespace=True)
    timezone = serializers.CharField(required=False, max_length=64, default="UTC")
    run_at = UTCDateTimeField(required=False, allow_null=True)

    def validate(self, attrs):
        if attrs["type"] == ScheduleType.CRON:
            if attrs.get("run_at") is not None:
                raise serializers.ValidationError({"run_at": ["Only for schedules of type 'once'."]})
            if not attrs.get("expression"):
                raise serializers.ValidationError({"expression": ["This field is required for type 'cron'."]})
            try:
                schedule = CronSchedule.parse(attrs["expression"], attrs["timezone"])
            except ScheduleError as error:
                raise serializers.ValidationError({error.field: [error.message]}) from error
            attrs["expression"] = schedule.expression
        else:
            for name in ("expression",):
                if attrs.get(name):
                    raise serializers.ValidationError({name: ["Only for schedules of type 'cron'."]})
        return attrs


class TargetSerializer(StrictSerializer):
    url = serializers.CharField(max_length=2048)
    method = serializers.ChoiceField(choices=HTTP_METHODS, default="POST")
    headers = serializers.DictField(child=serializers.CharField(max_length=4096, allow_blank=True), default=dict)
    body = serializers.JSONField(required=False, allow_null=True, default=None)

    def validate_url(self, value):
        try:
            check_url(value, allow_private_networks=settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS)
        except (InvalidTarget, UnsafeTarget) as error:
            raise serializers.ValidationError(str(error)) from error
        return value

    def validate_headers(self, value):
        if len(value) > 50:
            raise serializers.ValidationError("At most 50 headers.")
        for name in value:
            if not name or not all(33 <= ord(c) < 127 and c not in '()<>@,;:\\"/[]?={}' for c in name):
                raise serializers.ValidationError(f"'{name}' is not a valid header name.")
            if name.lower() in RESERVED_HEADERS:
                raise serializers.ValidationError(f"'{name}' is set by Chime and cannot be overridden.")
        for name, header_value in value.items():
            if "\r" in header_value or "\n" in header_value:
                raise serializers.ValidationError(f"The value of '{name}' contains a line break.")
        return value


class RetrySerializer(StrictSerializer):
    max_attempts = serializers.IntegerField(min_value=1, max_value=50, default=5)
    initial_backoff_seconds = serializers.IntegerField(min_value=1, max_value=86400, default=10)
    max_backoff_seconds = serializers.IntegerField(min_value=1, max_value=7 * 86400, default=3600)

    def validate(self, attrs):
        if attrs["max_backoff_seconds"] < attrs["initial_backoff_seconds"]:
            raise serializers.ValidationError({"max_backoff_seconds": ["Must be at least initial_backoff_seconds."]})
        return attrs


def retry_defaults() -> dict:
    return {"max_attempts": 5, "initial_backoff_seconds": 10, "max_backoff_seconds": 3600}


class DstPolicySerializer(StrictSerializer):
    gap = serializers.ChoiceField(choices=DstGap.choices, default=DstGap.SHIFT)
    overlap = serializers.ChoiceField(choices=DstOverlap.choices, default=DstOverlap.FIRST)


def dst_policy_defaults() -> dict:
    return {"gap": DstGap.SHIFT.value, "overlap": DstOverlap.FIRST.value}


class JobInputSerializer(StrictSerializer):
    name = serializers.CharField(max_length=200)
    schedule = ScheduleSerializer()
    target = TargetSerializer()
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.DEFAULT)
    timeout_seconds = serializers.IntegerField(min_value=1, max_value=settings.CHIME_MAX_TIMEOUT_SECONDS, default=30)
    retry = RetrySerializer(default=retry_defaults)
    enabled = serializers.BooleanField(default=True)
    dst_policy = DstPolicySerializer(default=dst_policy_defaults)
    misfire_policy = serializers.ChoiceField(choices=MisfirePolicy.choices, default=MisfirePolicy.CATCH_UP)
    catch_up_limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)
    jitter_seconds = serializers.IntegerField(min_value=0, max_value=3600, default=0)
    concurrency_policy = serializers.ChoiceField(choices=ConcurrencyPolicy.choices, default=ConcurrencyPolicy.ALLOW)
    failure_threshold = serializers.IntegerField(min_value=0, max_value=1000, default=10)

    def to_model_fields(self) -> dict:
        """The validated contract as JobDefinition fields (plus `enabled`) for apps.jobs.services."""
        data = self.validated_data
        schedule, target, retry = data["schedule"], data["target"], data["retry"]
        return {
            "name": data["name"],
            "schedule_type": schedule["type"],
            "cron_expression": schedule.get("expression", ""),
            "timezone": schedule.get("timezone") or "UTC",
            "run_at": schedule.get("run_at"),
            "target_url": target["url"],
            "target_method": target["method"],
            "target_headers": target["headers"],
            "target_body": target.get("body"),
            "priority": data["priority"],
            "timeout_seconds": data["timeout_seconds"],
            "retry_max_attempts": retry["max_attempts"],
            "retry_initial_backoff_seconds": retry["initial_backoff_seconds"],
            "retry_max_backoff_seconds": retry["max_backoff_seconds"],
            "enabled": data["enabled"],
            "dst_gap": data["dst_policy"]["gap"],
            "dst_overlap": data["dst_policy"]["overlap"],
            "misfire_policy": data["misfire_policy"],
            "catch_up_limit": data["catch_up_limit"],
            "jitter_seconds": data["jitter_seconds"],
            "concurrency_policy": data["concurrency_policy"],
            "failure_threshold": data["failure_threshold"],
        }


def schedule_representation(job: JobDefinition) -> dict:
    if job.schedule_type == ScheduleType.CRON:
        return {"type": "cron", "expression": job.cron_expression, "timezone": job.timezone}
    return {"type": "once", "run_at": UTCDateTimeField().to_representation(job.run_at)}


class JobSerializer(serializers.Serializer):
    """Output only."""

    def to_representation(self, job: JobDefinition) -> dict:
        when = UTCDateTimeField().to_representation
        return {
            "id": str(job.id),
            "name": job.name,
            "status": job.status,
            "status_reason": job.status_reason or None,
            "schedule": schedule_representation(job),
            "target": {
                "url": job.target_url,
                "method": job.target_method,
                "headers": job.target_headers,
                "body": job.target_body,
            },
            "priority": job.priority,
            "timeout_seconds": job.timeout_seconds,
            "retry": {
                "max_attempts": job.retry_max_attempts,
                "initial_backoff_seconds": job.retry_initial_backoff_seconds,
                "max_backoff_seconds": job.retry_max_backoff_seconds,
            },
            "enabled": job.enabled,
            "dst_policy": {"gap": job.dst_gap, "overlap": job.dst_overlap},
            "misfire_policy": job.misfire_policy,
            "catch_up_limit": job.catch_up_limit,
            "jitter_seconds": job.jitter_seconds,
            "concurrency_policy": job.concurrency_policy,
            "failure_threshold": job.failure_threshold,
            "consecutive_failures": job.consecutive_failures,
            "next_fire_at": when(job.next_fire_at),
            "created_at": when(job.created_at),
            "updated_at": when(job.updated_at),
        }


class JobDetailSerializer(JobSerializer):
    def to_representation(self, job: JobDefinition) -> dict:
        data = super().to_representation(job)
        data["recent_runs"] = RunSerializer(self.context.get("recent_runs", []), many=True).data
        return data


class PreviewSerializer(StrictSerializer):
    expression = serializers.CharField(max_length=200)
    timezone = serializers.CharField(max_length=64, default="UTC")
    count = serializers.IntegerField(min_value=1, max_value=MAX_PREVIEW_COUNT, default=10)
    start = UTCDateTimeField(required=False, allow_null=True, default=None)
    dst_policy = DstPolicySerializer(default=dst_policy_defaults)

    def validate(self, attrs):
        try:
            attrs["schedule"] = CronSchedule.parse(
                attrs["expression"], attrs["timezone"], DstPolicy(**attrs["dst_policy"])
            )
        except ScheduleError as error:
            raise serializers.ValidationError({error.field: [error.message]}) from error
        return attrs


class BackfillSerializer(StrictSerializer):
    start = UTCDateTimeField()
    end = UTCDateTimeField()

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": ["Must be after start."]})
        if attrs["end"] > timezone.now():
            raise serializers.ValidationError({"end": ["Backfill is for the past; end must not be in the future."]})
        return attrs
