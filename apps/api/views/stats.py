"""GET /api/v1/stats: the calling tenant's delivery health per job and per endpoint host."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from apps.jobs.reliability import WINDOWS, tenant_reliability

from ..fields import StrictSerializer, UTCDateTimeField
from ..schema import ERRORS

MAX_ROWS = 200  # the bound of every `limit` in the API


def _health_fields() -> dict:
    return {
        "attempts": serializers.IntegerField(),
        "succeeded_attempts": serializers.IntegerField(),
        "success_ratio": serializers.FloatField(allow_null=True, help_text="2xx attempts / attempts; null: none"),
        "runs_succeeded": serializers.IntegerField(),
        "runs_failed": serializers.IntegerField(help_text="runs dead-lettered in the window"),
        "fire_lag_p95_seconds": serializers.FloatField(
            allow_null=True, help_text="first attempts' start minus scheduled time, 95th percentile"
        ),
        # Two flat fields rather than a nullable object: OpenAPI 3.0 cannot say "null or this object"
        # in a way every generated client and validator reads alike.
        "last_failure_at": serializers.DateTimeField(allow_null=True),
        "last_failure_reason": serializers.CharField(
            allow_null=True, help_text="`HTTP <status>`, or the error kind and message (`timeout: ...`)"
        ),
    }


StatsSerializer = inline_serializer(
    "Stats",
    {
        "window": serializers.ChoiceField(choices=list(WINDOWS)),
        "since": serializers.DateTimeField(),
        "until": serializers.DateTimeField(),
        "sampled": serializers.BooleanField(help_text="true: computed over the window's latest 50,000 attempts"),
        "jobs": serializers.ListField(
            child=inline_serializer(
                "JobHealth", {"job_id": serializers.UUIDField(), "name": serializers.CharField(), **_health_fields()}
            )
        ),
        "hosts": serializers.ListField(
            child=inline_serializer("HostHealth", {"host": serializers.CharField(), **_health_fields()})
        ),
    },
)


class StatsQuery(StrictSerializer):
    window = serializers.ChoiceField(choices=list(WINDOWS), default="hour")
    limit = serializers.IntegerField(min_value=1, max_value=MAX_ROWS, default=100)


def _health(health) -> dict:
    failure = health.last_failure
    return {
        "attempts": health.attempts,
        "succeeded_attempts": health.succeeded_attempts,
        "success_ratio": health.success_ratio,
        "runs_succeeded": health.runs_succeeded,
        "runs_failed": health.runs_failed,
        "fire_lag_p95_seconds": health.fire_lag_p95_seconds,
        "last_failure_at": None if failure is None else UTCDateTimeField().to_representation(failure.at),
        "last_failure_reason": None if failure is None else failure.reason,
    }


def _worst_first(health) -> tuple:
    return (-(health.attempts - health.succeeded_attempts), -health.attempts)


@extend_schema(
    summary="Delivery health",
    description="Per job and per endpoint host, over the last `hour` or `day`: attempts and their success "
    "ratio, runs succeeded and dead-lettered, fire lag p95, and the last failure with its reason. Jobs and "
    f"hosts with attempts in the window only, most failed attempts first, at most `limit` of each (1-{MAX_ROWS}).",
    parameters=[StatsQuery],
    responses={200: StatsSerializer, **ERRORS},
)
@api_view(["GET"])
def stats(request):
    query = StatsQuery(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    limit = query.validated_data["limit"]
    report = tenant_reliability(tenant=request.user.tenant, now=timezone.now(), window=query.validated_data["window"])
    when = UTCDateTimeField().to_representation
    jobs = sorted(report.jobs.items(), key=lambda item: _worst_first(item[1][1]))[:limit]
    hosts = sorted(report.hosts.items(), key=lambda item: _worst_first(item[1]))[:limit]
    return Response(
        {
            "window": report.window,
            "since": when(report.since),
            "until": when(report.until),
            "sampled": report.sampled,
            "jobs": [{"job_id": str(job_id), "name": name, **_health(h)} for job_id, (name, h) in jobs],
            "hosts": [{"host": host, **_health(h)} for host, h in hosts],
        }
    )
