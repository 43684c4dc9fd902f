"""One error shape for every API failure:

{"error": {"code": "invalid", "message": "...", "fields": {"schedule.expression": ["..."]}}}
"""

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from apps.tenants.quotas import QuotaExceeded

from .parsers import PayloadTooLarge

# A quota's field, as the API names it (the service names the model's field).
QUOTA_FIELDS = {
    "retry_max_attempts": "retry.max_attempts",
    "retry_initial_backoff_seconds": "retry.initial_backoff_seconds",
}
QUOTA_CODES = {400: "invalid", 403: "quota_exceeded", 429: "throttled"}


def flatten_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """Turn DRF's nested error detail into {"dotted.path": ["message", ...]}."""
    flat: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = prefix if key == "non_field_errors" else (f"{prefix}.{key}" if prefix else str(key))
            for path, messages in flatten_errors(value, name).items():
                flat.setdefault(path, []).extend(messages)
    elif isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        for index, value in enumerate(detail):
            flat.update(flatten_errors(value, f"{prefix}.{index}" if prefix else str(index)))
    else:
        items = detail if isinstance(detail, list) else [detail]
        flat[prefix or "non_field_errors"] = [str(item) for item in items]
    return flat


def error_response(code: str, message: str, http_status: int, fields=None, headers=None, limit=None) -> Response:
    body = {"error": {"code": code, "message": message}}
    if fields:
        body["error"]["fields"] = fields
    if limit:
        body["error"]["limit"] = limit
    return Response(body, status=http_status, headers=headers)


def quota_response(exc: QuotaExceeded) -> Response:
    """400/403/429 naming the limit (docs/api.md#limits-and-quotas); a 429 says when to retry."""
    field = QUOTA_FIELDS.get(exc.field, exc.field)
    message = f"{field}: {exc.message}" if field else exc.message
    return error_response(
        QUOTA_CODES.get(exc.status, "quota_exceeded"),
        message,
        exc.status,
        fields={field: [exc.message]} if field else None,
        headers={"Retry-After": str(exc.retry_after_seconds)} if exc.status == 429 else None,
        limit={"name": exc.limit, "value": exc.value},
    )


def exception_handler(exc, context):
    if isinstance(exc, QuotaExceeded):
        return quota_response(exc)
    if isinstance(exc, RequestDataTooBig):  # Django's own check, e.g. for form bodies
        exc = PayloadTooLarge()
    if isinstance(exc, (Http404, ObjectDoesNotExist)):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten_errors(exc.detail)
        first_path, first_messages = next(iter(fields.items()))
        message = first_messages[0] if first_path == "non_field_errors" else f"{first_path}: {first_messages[0]}"
        return error_response("invalid", message, status.HTTP_400_BAD_REQUEST, fields=fields)
    code = exc.get_codes() if isinstance(exc, exceptions.APIException) else "error"
    if not isinstance(code, str):
        code = "error"
    detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
    headers = {k: v for k, v in response.items() if k in ("WWW-Authenticate", "Retry-After", "Allow")}
    return error_response(code, str(detail), response.status_code, headers=headers)
