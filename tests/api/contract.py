"""The OpenAPI schema is the contract: every API response a test produces is checked against it.

`check_response` validates one Django test-client response with openapi-core against the schema
the server serves (/api/v1/schema): the status code must be documented for the operation, the
content type declared, and the body must match the response schema, error bodies included.
A path under /api/v1 that the schema does not list (a trailing slash, a typo) or a method it does
not list must still answer with the one error shape (components.schemas.Error).

tests/conftest.py applies it to every request of every test (an autouse fixture).
"""

import functools
import json

from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from openapi_core import OpenAPI
from openapi_core.contrib.django import DjangoOpenAPIRequest, DjangoOpenAPIResponse
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from openapi_schema_validator import OAS30ReadValidator

API_PREFIX = "/api/v1/"
UNDESCRIBED = ("/api/v1/schema", "/api/v1/docs")  # the schema and its viewer describe the API, not in it


class ContractViolation(AssertionError):
    """A response the schema does not allow."""


@functools.cache
def schema_document() -> dict:
    """The schema as the server serves it (same generator, rendered to plain JSON)."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(schema, renderer_context={}))


@functools.cache
def openapi() -> OpenAPI:
    return OpenAPI.from_dict(schema_document())


class _Request(DjangoOpenAPIRequest):
    """Find the operation from the path itself: Django's regex routes are no OpenAPI templates."""

    @property
    def path_pattern(self):
        return None

    @property
    def body(self) -> bytes:
        return b""  # only the response is checked; the view has read the request stream already


def _inline(node):
    """The schema with its #/components/schemas references replaced by what they name."""
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(schema_document()["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]])
        return {key: _inline(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(item) for item in node]
    return node


@functools.cache
def _error_schema() -> OAS30ReadValidator:
    return OAS30ReadValidator(_inline({"$ref": "#/components/schemas/Error"}))


def check_response(response) -> None:
    """Raise ContractViolation when `response` (from Django's test client) breaks the schema."""
    request = response.wsgi_request
    path = request.path
    if not path.startswith(API_PREFIX) or path.startswith(UNDESCRIBED):
        return
    if request.method in ("HEAD", "OPTIONS"):
        return  # answered by DRF for every GET (no body) and for CORS-style discovery; not operations
    where = f"{request.method} {path} -> {response.status_code}"
    try:
        openapi().validate_response(_Request(request), DjangoOpenAPIResponse(response))
    except (PathNotFound, OperationNotFound):
        _check_undocumented(response, where)
    except Exception as error:  # openapi-core's validation errors; the cause says what broke
        details = "; ".join(_causes(error)) or str(error)
        raise ContractViolation(
            f"{where}: {type(error).__name__}: {details}\nbody: {response.content[:500]!r}"
        ) from error


def _check_undocumented(response, where: str) -> None:
    """A path or method the schema does not list: a 404 or 405 in the one error shape."""
    if response.status_code not in (404, 405):
        raise ContractViolation(f"{where}: not in the schema, yet answered {response.status_code}")
    try:
        body = json.loads(response.content)
    except ValueError as error:
        raise ContractViolation(f"{where}: the error body is not JSON") from error
    errors = list(_error_schema().iter_errors(body))
    if errors:
        raise ContractViolation(f"{where}: the error body does not match Error: {errors[0]}")


def _causes(error: BaseException):
    """The JSON Schema errors behind an openapi-core error, each with where it is in the body."""
    seen = error
    while seen is not None:
        for inner in getattr(seen, "schema_errors", ()) or ():
            yield f"at {list(inner.absolute_path)}: {inner.message}"
        seen = seen.__cause__


def install(monkeypatch) -> None:
    """Check each response of Django's test client (DRF's APIClient goes through it too)."""
    original = Client.request

    def request(self, **kwargs):
        response = original(self, **kwargs)
        check_response(response)
        return response

    monkeypatch.setattr(Client, "request", request)
