"""ASGI entry point: HTTP through Django, WebSockets through Channels (live dashboard)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

from apps.core.asgi_handler import get_one_hop_asgi_application

# The middleware chain and the view in one thread hop per request (apps/core/asgi_handler.py).
django_asgi_app = get_one_hop_asgi_application()

# Imported after Django is set up: they load models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from config.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # Session cookie auth, and only from pages served by one of ALLOWED_HOSTS (cross-site
        # WebSocket hijacking: browsers send cookies with any origin's WebSocket).
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
