"""OpenAPI bits drf-spectacular cannot infer."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
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


# PostgreSQL cannot store U+0000, so every string input refuses it (apps/jobs/targets.py, the NUL
# rule): the schema says so, or a client (or a fuzzer) would take a 400 for schema-valid data.
NO_NUL_PATTERN = "^[^\\u0000]*$"


def forbid_nul(schema: dict) -> None:
    """Add NO_NUL_PATTERN to every free-form string of a request schema (not enums, formats or $refs)."""
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "string" and not ({"enum", "format", "pattern"} & schema.keys()):
        schema["pattern"] = NO_NUL_PATTERN
    for key in ("properties",):
        for child in schema.get(key, {}).values():
            forbid_nul(child)
    for key in ("items", "additionalProperties"):
        forbid_nul(schema.get(key))


class StrictSerializerScheme(OpenApiSerializerExtension):
    """Request bodies are closed: StrictSerializer refuses unknown fields, so the schema says
    `additionalProperties: false`. A PATCH body (the `Patched...` component drf-spectacular makes)
    has no `default`s: a field left out keeps its stored value, so a client generated from the
    schema must not fill one in (it would reset priority, timeout, `enabled`, ... on every PATCH)."""

    target_class = "apps.api.fields.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["additionalProperties"] = False
        forbid_nul(schema)
        if not type(self.target).__doc__:  # StrictSerializer's own docstring is for developers
            schema.pop("description", None)
        if getattr(self.target, "partial", False):
            for prop in schema.get("properties", {}).values():
                prop.pop("default", None)
        return schema
