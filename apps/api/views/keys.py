from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from apps.tenants import selectors, services
from apps.tenants.models import ApiKey

from ..schema import ERRORS
from ..serializers.keys import ApiKeyCreatedSerializer, ApiKeyInputSerializer, ApiKeySerializer
from .base import TenantViewSet


class ApiKeyViewSet(TenantViewSet):
    queryset = ApiKey.objects.none()
    serializer_class = ApiKeySerializer

    @extend_schema(responses={200: ApiKeySerializer(many=True), **ERRORS})
    def list(self, request):
        return Response(ApiKeySerializer(selectors.api_key_list(tenant=self.tenant), many=True).data)

    @extend_schema(request=ApiKeyInputSerializer, responses={201: ApiKeyCreatedSerializer, **ERRORS})
    def create(self, request):
        serializer = ApiKeyInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        created = services.api_key_create(tenant=self.tenant, name=serializer.validated_data["name"])
        created.api_key.key = created.raw_key
        return Response(ApiKeyCreatedSerializer(created.api_key).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None, **ERRORS})
    def destroy(self, request, pk=None):
        """Revoke the key; it is refused from the next request on. The row stays, for the record."""
        services.api_key_revoke(api_key=selectors.api_key_get(tenant=self.tenant, api_key_id=self.object_id()))
        return Response(status=status.HTTP_204_NO_CONTENT)
