"""OpenAPI bits drf-spectacular cannot infer."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import serializers


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <API key>"}


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()


ERRORS = {status: ErrorSerializer for status in (400, 401, 403, 404, 409, 413, 429)}
