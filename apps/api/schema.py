"""OpenAPI bits drf-spectacular cannot infer."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import serializers


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <API key>"}


class LimitSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The limit refused, e.g. max_jobs (docs/api.md#limits-and-quotas)")
    value = serializers.JSONField(help_text="Its value for this tenant: a number, or a rate like '1200/min'")


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), required=False)
    limit = LimitSerializer(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()


ERRORS = {status: ErrorSerializer for status in (400, 401, 403, 404, 409, 413, 429)}
