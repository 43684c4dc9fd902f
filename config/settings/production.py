"""Production: base plus HTTPS behind a TLS-terminating proxy (a PaaS router, a load balancer).

The default of manage.py, config/asgi.py, config/wsgi.py and config/celery.py, so every Procfile
process gets it with nothing set. `manage.py check --deploy` passes but for W005 and W021 (HSTS
for subdomains, preload list): decisions about the operator's domain, opt-in below
(docs/operations.md#deploying).
"""

from .base import *  # noqa: F403
from .base import env

# The proxy terminates TLS and says so in X-Forwarded-Proto. Trusting the header is right only
# when every request passes through a proxy that sets it (a client cannot then forge it).
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The same proxy appends the client's address to X-Forwarded-For; the login throttle's "client
# address" is that entry (apps/tenants/quotas.py, client_address), not the router's REMOTE_ADDR,
# which every client would share. Set it to the number of proxies that append (0: none).
CHIME_TRUSTED_PROXY_HOPS = env.int("CHIME_TRUSTED_PROXY_HOPS", default=1)
# Plain http is redirected to https. The health checks a PaaS or load balancer makes over http
# inside its network (/healthz, /readyz) are answered before this redirect (apps/core/health.py).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# HSTS is sent on https responses only; start low if the domain is new to https.
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 30)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
