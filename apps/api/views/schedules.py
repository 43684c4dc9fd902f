from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from ..fields import UTCDateTimeField
from ..schema import ERRORS
from ..serializers.jobs import PreviewSerializer

FireTimeSerializer = inline_serializer(
    "FireTime",
    {
        "utc": serializers.DateTimeField(),
        "local": serializers.CharField(help_text="ISO 8601 with the zone's offset"),
        "dst": serializers.ChoiceField(choices=["gap", "overlap"], allow_null=True),
    },
)
PreviewResultSerializer = inline_serializer(
    "SchedulePreview",
    {
        "expression": serializers.CharField(),
        "timezone": serializers.CharField(),
        "fixed_time": serializers.BooleanField(),
        "fire_times": serializers.ListField(child=FireTimeSerializer),
    },
)


@extend_schema(
    summary="Preview a schedule",
    description="The next fire times of a cron expression in a time zone (UTC and local), with the effect of "
    "DST flagged (`dst`: `gap` or `overlap`). Nothing is stored.",
    request=PreviewSerializer,
    responses={200: PreviewResultSerializer, **ERRORS},
)
@api_view(["POST"])
def schedule_preview(request):
    """The next fire times of a cron expression in a zone, with the effect of DST flagged."""
    serializer = PreviewSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    schedule = data["schedule"]
    when = UTCDateTimeField().to_representation
    fire_times = schedule.preview(data["start"] or timezone.now(), data["count"])
    return Response(
        {
            "expression": schedule.expression,
            "timezone": data["timezone"],
            "fixed_time": schedule.is_fixed_time,
            "fire_times": [{"utc": when(f.utc), "local": f.local.isoformat(), "dst": f.dst} for f in fire_times],
        }
    )
