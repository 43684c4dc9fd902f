"""The v1 job contract (docs/api.md). Input is validated here; writes go through apps.jobs.services."""

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

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
from apps.jobs.secrets import SecretHeaderError, marked_names, restore_redacted, visible_headers
from apps.jobs.targets import (
    HTTP_METHODS,
    MAX_BODY_BYTES,
    MAX_BODY_DEPTH,
    MAX_HEADERS,
    TargetError,
    check_target_body,
    check_target_headers,
    check_target_url,
)

from ..fields import StrictCharField, StrictSerializer, UTCDateTimeField
from .runs import RunSerializer


class ScheduleSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=ScheduleType.choices)
    expression = StrictCharField(required=False, max_length=120, trim_whitespace=True)
    timezone = StrictCharField(required=False, max_length=64, default="UTC")
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
    url = StrictCharField(max_length=2048)
    method = serializers.ChoiceField(choices=HTTP_METHODS, default="POST")
    headers = serializers.DictField(child=StrictCharField(max_length=4096, allow_blank=True), default=dict)
    # Names of headers to treat as secret on top of the credential-like ones (docs/api.md#header-secrecy).
    secret_headers = serializers.ListField(child=StrictCharField(max_length=256), default=list, max_length=MAX_HEADERS)
    body = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text=f"Any JSON, at most {MAX_BODY_DEPTH} levels deep and {MAX_BODY_BYTES} bytes; none for GET. "
        "null: Chime sends a small event (docs/api.md#what-your-endpoint-receives).",
    )

    def validate_url(self, value):
        try:
            check_target_url(value)
        except TargetError as error:
            raise serializers.ValidationError(str(error)) from error
        return value

    def validate_headers(self, value):
        try:
            check_target_headers(value)
        except TargetError as error:
            raise serializers.ValidationError(str(error)) from error
        return value

    def validate(self, attrs):
        """Secret names must be headers of the job; a `<redacted>` value keeps the stored one (PATCH:
        the view passes the job as context["job"])."""
        try:
            check_target_body(attrs.get("body"), method=attrs["method"])
        except TargetError as error:
            raise serializers.ValidationError({"body": [str(error)]}) from error
        try:
            attrs["secret_headers"] = marked_names(attrs["secret_headers"], attrs["headers"])
        except SecretHeaderError as error:
            raise serializers.ValidationError({"secret_headers": [str(error)]}) from error
        try:
            attrs["headers"] = restore_redacted(attrs["headers"], job=self.context.get("job"), url=attrs["url"])
        except SecretHeaderError as error:
            raise serializers.ValidationError({"headers": [str(error)]}) from error
        return attrs


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
    name = StrictCharField(max_length=200)
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
        return job_model_fields(self.validated_data)


def job_model_fields(data: dict) -> dict:
    """Validated job input (JobInputSerializer's validated data) as JobDefinition fields plus `enabled`."""
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
        "secret_header_names": target["secret_headers"],
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


class BlankAsNullCharField(serializers.CharField):
    def to_representation(self, value):
        return value or None


class ScheduleOutSerializer(serializers.Serializer):
    type = serializers.ChoiceField(source="schedule_type", choices=ScheduleType.choices)
    expression = serializers.SerializerMethodField()
    timezone = serializers.SerializerMethodField()
    run_at = UTCDateTimeField(allow_null=True)

    def get_expression(self, job) -> str | None:
        return job.cron_expression if job.schedule_type == ScheduleType.CRON else None

    def get_timezone(self, job) -> str | None:
        return job.timezone if job.schedule_type == ScheduleType.CRON else None


class TargetOutSerializer(serializers.Serializer):
    url = serializers.CharField(source="target_url")
    method = serializers.CharField(source="target_method")
    headers = serializers.SerializerMethodField()
    secret_headers = serializers.ListField(source="secret_header_names", child=serializers.CharField())
    body = serializers.JSONField(source="target_body", allow_null=True)

    @extend_schema_field(serializers.DictField(child=serializers.CharField()))
    def get_headers(self, job) -> dict:
        """Secret values are `<redacted>`, never returned (apps/jobs/secrets.py)."""
        return visible_headers(job)


class RetryOutSerializer(serializers.Serializer):
    max_attempts = serializers.IntegerField(source="retry_max_attempts")
    initial_backoff_seconds = serializers.IntegerField(source="retry_initial_backoff_seconds")
    max_backoff_seconds = serializers.IntegerField(source="retry_max_backoff_seconds")


class DstPolicyOutSerializer(serializers.Serializer):
    gap = serializers.ChoiceField(source="dst_gap", choices=DstGap.choices)
    overlap = serializers.ChoiceField(source="dst_overlap", choices=DstOverlap.choices)


class JobSerializer(serializers.ModelSerializer):
    """A job, as every response shows it (docs/api.md#jobs). Secret header values are `<redacted>`."""

    # Output only: input goes through JobInputSerializer. The docstrings here are the schema's
    # component descriptions, so they are written for API users.

    id = serializers.CharField(read_only=True)
    status_reason = BlankAsNullCharField(allow_null=True)
    schedule = ScheduleOutSerializer(source="*")
    target = TargetOutSerializer(source="*")
    retry = RetryOutSerializer(source="*")
    enabled = serializers.BooleanField()
    dst_policy = DstPolicyOutSerializer(source="*")
    next_fire_at = UTCDateTimeField(allow_null=True)
    created_at = UTCDateTimeField()
    updated_at = UTCDateTimeField()

    class Meta:
        model = JobDefinition
        fields = [
            "id",
            "name",
            "status",
            "status_reason",
            "schedule",
            "target",
            "priority",
            "timeout_seconds",
            "retry",
            "enabled",
            "dst_policy",
            "misfire_policy",
            "catch_up_limit",
            "jitter_seconds",
            "concurrency_policy",
            "failure_threshold",
            "consecutive_failures",
            "next_fire_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    """A job with its 20 most recent runs, newest first."""

    recent_runs = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "recent_runs"]
        read_only_fields = fields

    @extend_schema_field(RunSerializer(many=True))
    def get_recent_runs(self, job) -> list:
        return RunSerializer(self.context.get("recent_runs", []), many=True).data


def job_as_input(job: JobDefinition) -> dict:
    """The job in the input contract, for PATCH: request fields are laid over it and the result is
    validated like a new job, so a partial update can never store what a create would refuse."""
    data = JobSerializer(job).data
    schedule = dict(data["schedule"])
    if schedule["type"] == ScheduleType.CRON:
        schedule.pop("run_at")
    else:
        schedule.pop("expression")
        schedule.pop("timezone")
    keep = [name for name in JobInputSerializer().fields if name not in ("schedule",)]
    return {**{name: data[name] for name in keep}, "schedule": schedule}


class PreviewSerializer(StrictSerializer):
    expression = StrictCharField(max_length=200)
    timezone = StrictCharField(max_length=64, default="UTC")
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
