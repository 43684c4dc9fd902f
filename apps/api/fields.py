"""Serializer building blocks shared by every resource."""

from datetime import UTC

from rest_framework import serializers


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not know instead of silently dropping them."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A string, and only a string: DRF's CharField would turn 0 or 1.5 into "0" or "1.5"."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)

    def run_validation(self, data=serializers.empty):
        """`maxLength` holds for the string as sent (the schema's promise), not only after trimming."""
        if isinstance(data, str) and self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().run_validation(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUID in a string: DRF's UUIDField would read false or 7 as an integer UUID."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class UTCDateTimeField(serializers.DateTimeField):
    """ISO 8601 in and out; input must carry an offset (no guessing a zone), output is UTC with Z."""

    default_error_messages = {"naive": "Include a UTC offset, e.g. 2026-12-01T10:00:00Z."}

    def enforce_timezone(self, value):
        if value.tzinfo is None:
            self.fail("naive")
        return value.astimezone(UTC)

    def to_representation(self, value):
        if value is None:
            return None
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
