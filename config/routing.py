"""WebSocket routes (config/asgi.py mounts them behind session auth and an Origin check)."""

from django.urls import path

from apps.dashboard.consumers import LiveConsumer

websocket_urlpatterns = [
    path("ws/live/", LiveConsumer.as_asgi()),
]
