from rest_framework.decorators import api_view
from rest_framework.response import Response

from apps.api.fields import UTCDateTimeField
from apps.tenants.selectors import signing_secret_current


@api_view(["GET"])
def signing_secret(request):
    current = signing_secret_current(tenant=request.user.tenant)
    return Response({"secret": current.secret, "created_at": UTCDateTimeField().to_representation(current.created_at)})
