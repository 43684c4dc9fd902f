from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from apps.api.fields import UTCDateTimeField
from apps.api.schema import ERRORS
from apps.tenants.selectors import signing_secret_current
from apps.tenants.services import signing_secret_rotate


def secret_body(secret) -> dict:
    return {"secret": secret.secret, "created_at": UTCDateTimeField().to_representation(secret.created_at)}


SecretSerializer = inline_serializer(
    "SigningSecret", {"secret": serializers.CharField(), "created_at": serializers.DateTimeField()}
)


@extend_schema(
    summary="Get the signing secret",
    description="The `whsec_` secret that signs every delivery (Standard Webhooks): "
    "verify `webhook-signature` with it.",
    responses={200: SecretSerializer, **ERRORS},
)
@api_view(["GET"])
def signing_secret(request):
    return Response(secret_body(signing_secret_current(tenant=request.user.tenant)))


@extend_schema(
    summary="Rotate the signing secret",
    description="A new signing secret. The previous one stays valid for 24 hours and every delivery carries "
    "both signatures meanwhile: deploy the new one to your receiver within a day.",
    request=None,
    responses={201: SecretSerializer, **ERRORS},
)
@api_view(["POST"])
def signing_secret_rotation(request):
    """A new signing secret; the previous one keeps signing (alongside) for 24 hours."""
    return Response(secret_body(signing_secret_rotate(tenant=request.user.tenant)), status=201)
