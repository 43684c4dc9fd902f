"""Base for every resource view: the tenant comes from the API key, and every lookup is scoped to it."""

import uuid

from django.urls import Resolver404, resolve
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, viewsets
from rest_framework.decorators import api_view, authentication_classes, permission_classes, throttle_classes


class TenantViewSet(viewsets.GenericViewSet):
    """Subclasses set `queryset = Model.objects.none()` only so the schema knows the id type;
    every read goes through a selector that takes the tenant."""

    lookup_value_regex = "[^/]+"

    @property
    def tenant(self):
        return self.request.user.tenant

    def object_id(self) -> uuid.UUID:
        """The {id} of the URL; a malformed one is simply not found."""
        try:
            return uuid.UUID(str(self.kwargs["pk"]))
        except ValueError:
            raise exceptions.NotFound() from None


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE"])
@authentication_classes([])
@permission_classes([])
@throttle_classes([])
def not_found(request, *args, **kwargs):
    """Any path under /api/v1 that no route takes. API paths never end with a slash; a client that
    adds one is told the path it meant instead of a bare 404 (not redirected: a redirected POST
    loses its body in many clients, and one rule for every method is easier to learn)."""
    meant = request.path.rstrip("/")
    if meant != request.path and _is_api_route(meant):
        raise exceptions.NotFound(f"No such API endpoint: API paths have no trailing slash, use {meant}")
    raise exceptions.NotFound("No such API endpoint.")


def _is_api_route(path: str) -> bool:
    try:
        match = resolve(path)
    except Resolver404:
        return False
    return match.namespace == "api" and match.url_name != "not-found"


def reject_unknown_params(request, allowed: set[str]) -> None:
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise exceptions.ValidationError({name: ["Unknown query parameter."] for name in unknown})
