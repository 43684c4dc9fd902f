from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class ApiKeyRateThrottle(SimpleRateThrottle):
    """Per API key. Counts live in the default cache: Redis when REDIS_URL is set, so every web
    process shares them (a per-process LocMem cache would multiply the limit)."""

    scope = "api_key"

    def get_rate(self):
        return settings.CHIME_API_RATE_LIMIT

    def get_cache_key(self, request, view):
        if request.auth is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
