from rest_framework.pagination import CursorPagination
from rest_framework.response import Response


class IdCursorPagination(CursorPagination):
    """Newest first by UUIDv7 id (time-ordered and unique): stable under concurrent inserts."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

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
