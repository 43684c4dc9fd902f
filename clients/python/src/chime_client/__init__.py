"""Chime's Python SDK, the ``chimectl`` CLI, and a receiver toolkit for Chime's webhooks.

- :class:`Client` / :class:`AsyncClient`: every API operation (``chime_client.client``);
- :func:`verify` and :class:`WebhookReceiver`: check signatures, run a handler once per run
  (``chime_client.receiver``; framework helpers in ``chime_client.contrib``).
"""

__version__ = "0.1.0"

from .client import AsyncClient, Client
from .errors import (
    ApiError,
    AuthenticationError,
    ChimeError,
    ConflictError,
    NotFoundError,
    QuotaExceededError,
    RateLimitedError,
    ServerError,
    TransportError,
    ValidationError,
)
from .receiver import VerificationError, Webhook, WebhookReceiver, verify

__all__ = [
    "ApiError",
    "AsyncClient",
    "AuthenticationError",
    "ChimeError",
    "Client",
    "ConflictError",
    "NotFoundError",
    "QuotaExceededError",
    "RateLimitedError",
    "ServerError",
    "TransportError",
    "ValidationError",
    "VerificationError",
    "Webhook",
    "WebhookReceiver",
    "__version__",
    "verify",
]
