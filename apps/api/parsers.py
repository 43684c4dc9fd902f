import io

from django.conf import settings
from rest_framework import exceptions, parsers, status


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self, limit: int | None = None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE if limit is None else limit
        super().__init__(f"Request bodies are limited to {limit} bytes.")


class LimitedJSONParser(parsers.JSONParser):
    """JSON with a size limit. DRF reads the request stream itself, past Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE check, so the limit is enforced here (chunked bodies too)."""

    def max_bytes(self) -> int:
        return settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    def parse(self, stream, media_type=None, parser_context=None):
        limit = self.max_bytes()
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise PayloadTooLarge(limit)
        try:
            return super().parse(io.BytesIO(data), media_type, parser_context)
        except RecursionError:  # json's parser recurses per level: ~1,000 levels end it, a 400 not a 500
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None


class BatchJSONParser(LimitedJSONParser):
    """A batch of up to 1,000 jobs does not fit the limit of one request (256 KiB by default):
    its own limit, CHIME_API_MAX_BATCH_BODY_BYTES."""

    def max_bytes(self) -> int:
        return settings.CHIME_API_MAX_BATCH_BODY_BYTES
