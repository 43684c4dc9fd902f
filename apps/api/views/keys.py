from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from apps.tenants import selectors, services
from apps.tenants.models import ApiKey

from ..errors import error_response
from ..pagination import IdCursorPagination
from ..schema import ERRORS
from ..serializers.keys import ApiKeyCreatedSerializer, ApiKeyInputSerializer, ApiKeySerializer
from .base import TenantViewSet, reject_unknown_params


class ApiKeyViewSet(TenantViewSet):
    pagination_class = IdCursorPagination
    queryset = ApiKey.objects.none()
    serializer_class = ApiKeySerializer

    @extend_schema(
        summary="List API keys",
        description="The tenant's API keys, newest first, revoked ones included (`revoked_at` set). "
        "The raw key is never shown again after its creation; `prefix` identifies it. Paginated like every list.",
        responses={200: ApiKeySerializer(many=True), **ERRORS},
    )
    def list(self, request):
        reject_unknown_params(request, {"cursor", "limit"})
        page = self.paginate_queryset(selectors.api_key_list(tenant=self.tenant))
        return self.get_paginated_response(ApiKeySerializer(page, many=True).data)

    @extend_schema(
        summary="Create an API key",
        description="A new key for the tenant. The raw `key` is in this response only (Chime stores a hash): "
        "store it now. Refused with 403 `quota_exceeded` when the tenant has `max_api_keys` active keys.",
        request=ApiKeyInputSerializer,
        responses={201: ApiKeyCreatedSerializer, **ERRORS},
    )
    def create(self, request):
        serializer = ApiKeyInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        created = services.api_key_create(tenant=self.tenant, name=serializer.validated_data["name"])
        created.api_key.key = created.raw_key
        return Response(ApiKeyCreatedSerializer(created.api_key).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Revoke an API key",
        description="Revoke the key: it is refused (401) from the next request on; it stays listed with "
        "`revoked_at`. A key cannot revoke itself (409 `conflict`): use another key or the dashboard.",
        responses={204: None, **ERRORS},
    )
    def destroy(self, request, pk=None):
        """The row stays, for the record. The acting key is refused so a client (or a fuzzer) cannot lock
        itself out mid-session."""
        api_key = selectors.api_key_get(tenant=self.tenant, api_key_id=self.object_id())
        try:
            services.api_key_revoke(api_key=api_key, acting_key=request.user.api_key)
        except services.RevokingOwnKey as error:
            return error_response("conflict", str(error), status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)
