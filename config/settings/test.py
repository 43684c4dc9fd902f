"""Test settings: real PostgreSQL and Redis on 127.0.0.1 unless DATABASE_URL / REDIS_URL say otherwise."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chime")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("SECRET_KEY", "test-secret-key")
# Receivers in tests listen on 127.0.0.1. The SSRF tests start a worker with this set to false
# (and the transport tests build their own transport with it off).
os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
# Retry tests wait for retries 1 s apart, below the production floor (CHIME_QUOTA_MIN_RETRY_BACKOFF_SECONDS);
# tests/tenants/test_quotas.py sets the floor it tests.
os.environ.setdefault("CHIME_QUOTA_MIN_RETRY_BACKOFF_SECONDS", "1")

from .base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Static files: the production storage (base.STORAGES, hashed names from a manifest), so a page
# whose asset is missing fails here as in production. tests/conftest.py collects them once per
# session when the sources changed (config/staticfiles.py).
# Two suites on one server (e.g. a developer's run beside CI) each need their own database.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("CHIME_TEST_DATABASE", "test_chime")}  # noqa: F405
# The suite signs up from the test client's one address many times, run after run (the counter
# lives in Redis for an hour); tests/dashboard/test_login_throttle.py sets the limit it tests.
CHIME_SIGNUP_RATE_PER_ADDRESS = "1000/hour"
