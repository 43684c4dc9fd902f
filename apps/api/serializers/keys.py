from rest_framework import serializers

from apps.tenants.models import ApiKey

from ..fields import StrictCharField, StrictSerializer, UTCDateTimeField


class ApiKeySerializer(serializers.ModelSerializer):
    id = serializers.CharField(read_only=True)
    created_at = UTCDateTimeField()
    last_used_at = UTCDateTimeField(allow_null=True)
    revoked_at = UTCDateTimeField(allow_null=True)

    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(help_text="The raw key. Shown in this response only; store it now.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class ApiKeyInputSerializer(StrictSerializer):
    name = StrictCharField(max_length=100, required=False, allow_blank=True, default="")
