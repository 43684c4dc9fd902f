from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from .schema import NO_NUL_PATTERN


class IdCursorPagination(CursorPagination):
    """Newest first by UUIDv7 id (time-ordered and unique): stable under concurrent inserts."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

    def get_page_size(self, request):
        """A bad `limit` is a 400, not silently the default."""
        raw = request.query_params.getlist(self.page_size_query_param)
        if not raw:
            return self.page_size
        if len(raw) > 1 or not raw[0].isdigit() or not 1 <= int(raw[0]) <= self.max_page_size:
            raise ValidationError({"limit": [f"A whole number from 1 to {self.max_page_size}."]})
        return int(raw[0])

    def get_schema_operation_parameters(self, view):
        """The bounds the server enforces (get_page_size), so a client knows them too."""
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Opaque: the `next` link of the previous page carries it.",
                # No cursor holds a NUL (GET /runs answers one with a 400, cursor: Null characters...).
                "schema": {"type": "string", "pattern": NO_NUL_PATTERN},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Items per page (default {self.page_size}).",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
        ]

    def get_paginated_response(self, data):
        return Response({"results": data, "next": self.get_next_link()})

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["results", "next"],
            "properties": {
                "results": schema,
                "next": {"type": "string", "format": "uri", "nullable": True},
            },
        }
