from django.utils import timezone
from rest_framework.decorators import api_view
from rest_framework.response import Response

from ..fields import UTCDateTimeField
from ..serializers.jobs import PreviewSerializer


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
