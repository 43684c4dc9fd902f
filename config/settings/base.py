"""Settings for every environment, read from the environment (12-factor).

Every variable is documented in README.md#configuration. Unset REDIS_URL / DATABASE_URL mean the
embedded defaults: a SQLite file and a filesystem broker under var/, so Chime runs with no servers.
"""

from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from config.process import process_type

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env") if (BASE_DIR / ".env").exists() else None
# Embedded mode's files (SQLite database, filesystem broker, archive, heartbeats): var/ unless
# CHIME_VAR_DIR says elsewhere (the embedded-mode test runs `./chime run` in a directory of its own).
VAR_DIR = Path(env.str("CHIME_VAR_DIR", default=str(BASE_DIR / "var")))

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="dev-only-insecure-key" if DEBUG else environ.Env.NOTSET)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
PORT = env.int("PORT", default=8000)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "channels",
    "django_celery_results",
    "apps.core",
    "apps.tenants",
    "apps.jobs",
    "apps.scheduler",
    "apps.delivery",
    "apps.api",
    "apps.dashboard",
    "apps.history",
    "apps.operations",
]

MIDDLEWARE = [
    # /healthz and /readyz, before the host check and the https redirect (apps/core/health.py).
    "apps.core.health.HealthMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "dashboard:login"

# --- Database -------------------------------------------------------------------------------
PROCESS_TYPE = process_type()
# Connections one process may hold at most (its pool's max_size). The web process serves many
# requests concurrently (one thread each under ASGI); a worker child needs one for its task and
# one for its lease-renewing thread; a scheduler runs one loop.
DB_POOL_DEFAULT_MAX = {"web": 10, "worker": 4, "ops": 3, "scheduler": 3, "release": 2, "manage": 4, "test": 10}
# The young generation's threshold of the cyclic garbage collector in the worker and the
# scheduler, in allocations (Python's default 700), after everything loaded at start is frozen
# (apps/core/heap.py). 0 leaves Python's threshold.
CHIME_GC_THRESHOLD = env.int("CHIME_GC_THRESHOLD", default=20_000)
# The hot path's fixed statements are prepared once per connection (apps/core/prepared.py). Off
# for a connection pooler in transaction mode that cannot carry prepared statements.
CHIME_DB_PREPARED_STATEMENTS = env.bool("CHIME_DB_PREPARED_STATEMENTS", default=True)
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'chime.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Embedded mode: web, scheduler and worker share one file. WAL lets readers run beside the
    # writer; IMMEDIATE transactions take the write lock up front instead of failing mid-way.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    # A bounded pool per process (Django 5.2 + psycopg_pool) instead of a persistent connection
    # per thread: under ASGI every request runs in its own thread, and CONN_MAX_AGE kept one
    # connection alive per thread (~60 per web process under 16 clients; PostgreSQL's 100 ran out).
    # The pool's check tests a connection as it leaves the pool, so a PostgreSQL restart costs no request.
    # docs/operations.md#database-connections gives the bound per process type.
    # Off (0) in the test runner only: pytest-django wraps a test in one transaction, which may
    # well sit idle while the test waits for the real processes it started.
    DB_IDLE_IN_TRANSACTION_MS = env.int(
        "CHIME_DB_IDLE_IN_TRANSACTION_MS", default=0 if PROCESS_TYPE == "test" else 10000
    )
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps connections; Django must not
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # with a pool: psycopg_pool's check_connection
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),  # e.g. ?sslmode=require in DATABASE_URL
        "application_name": f"chime-{PROCESS_TYPE}",
        # A process stalled inside a transaction (SIGSTOP, a frozen VM) must not hold row locks
        # (partition leases, due runs) for longer than a lease: PostgreSQL ends its session.
        "options": f"-c idle_in_transaction_session_timeout={DB_IDLE_IN_TRANSACTION_MS}",
        # psycopg prepares nothing while this is None (Django's default), not even a statement
        # executed with prepare=True. A threshold no statement reaches: only the statements
        # apps/core/prepared.py asks for are prepared (Django's own cursors bind on the client and
        # never prepare).
        "prepare_threshold": 2**31 - 1 if CHIME_DB_PREPARED_STATEMENTS else None,
        "pool": {
            "min_size": env.int("CHIME_DB_POOL_MIN_SIZE", default=1),
            "max_size": env.int("CHIME_DB_POOL_MAX_SIZE", default=DB_POOL_DEFAULT_MAX[PROCESS_TYPE]),
            "timeout": env.float("CHIME_DB_POOL_TIMEOUT_SECONDS", default=30.0),
            "max_idle": 60,
        },
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Run history (apps/history, docs/architecture.md#run-history-and-retention): terminal runs older
# than the retention (a tenant's TenantLimits may override it) are archived, then deleted; dead
# letters (failed runs) are kept until replayed or for their own, longer retention.
CHIME_RUN_RETENTION_DAYS = env.int("CHIME_RUN_RETENTION_DAYS", default=30)
CHIME_DEAD_LETTER_RETENTION_DAYS = env.int("CHIME_DEAD_LETTER_RETENTION_DAYS", default=90)
# Finished bulk operations (apps/operations) and their Celery results are purged after this long.
CHIME_OPERATION_RETENTION_DAYS = env.int("CHIME_OPERATION_RETENTION_DAYS", default=30)
CHIME_PRUNE_BATCH_SIZE = env.int("CHIME_PRUNE_BATCH_SIZE", default=5000)  # runs per archive part and transaction
# Where archives go: "filesystem" (CHIME_ARCHIVE_DIR) or "s3" (any S3-compatible store through
# django-storages; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY as boto3 reads them).
CHIME_ARCHIVE_STORAGE = env.str("CHIME_ARCHIVE_STORAGE", default="filesystem")
CHIME_ARCHIVE_DIR = env.str("CHIME_ARCHIVE_DIR", default=str(VAR_DIR / "media" / "archive"))
if CHIME_ARCHIVE_STORAGE == "filesystem":
    STORAGES["chime_archive"] = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": CHIME_ARCHIVE_DIR, "base_url": None},
    }
elif CHIME_ARCHIVE_STORAGE == "s3":
    STORAGES["chime_archive"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": env.str("CHIME_ARCHIVE_S3_BUCKET"),
            "location": env.str("CHIME_ARCHIVE_S3_PREFIX", default="chime-archive"),
            "endpoint_url": env.str("CHIME_ARCHIVE_S3_ENDPOINT_URL", default=None),
            "region_name": env.str("CHIME_ARCHIVE_S3_REGION", default=None),
            "default_acl": None,
            "querystring_auth": True,
            "file_overwrite": False,
        },
    }
else:
    raise ImproperlyConfigured(f"CHIME_ARCHIVE_STORAGE must be 'filesystem' or 's3', not {CHIME_ARCHIVE_STORAGE!r}.")

# plain: one human line per record; json: one JSON object per line with the run/job/tenant fields
# it is about (apps/core/logs.py, docs/operations.md#logs).
LOG_FORMAT = env.str("LOG_FORMAT", default="plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be 'plain' or 'json', not {LOG_FORMAT!r}.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "apps.core.logs.ChimeJsonFormatter"},
    },
    "filters": {
        "client_errors_as_warnings": {"()": "config.logfilters.ClientErrorsAsWarnings"},
        "context": {"()": "apps.core.logs.ContextFilter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["client_errors_as_warnings", "context"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        # Without handlers of its own: Django's default logging gives "django" a console handler for
        # DEBUG, which printed every django.* record a second time beside the root's.
        "django": {"handlers": []},
        # A 4xx is in the web server's access log already; 5xx stay ERRORs with their traceback.
        # config/logfilters.py says why, and what happens to django.security's client errors.
        "django.request": {"level": "ERROR"},
    },
}

# --- Redis, broker, channel layer -----------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")

if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    # Every consumer waits for messages with channels_redis' blocking BZPOPMIN, which Redis answers
    # after 5 s when nothing came. redis-py 8 made socket_timeout default to 5 s too, so the client
    # gave up just before that answer: a TimeoutError in every idle consumer every ~5 s
    # (django/channels_redis#422). The layer's own timeouts stop depending on redis-py's defaults:
    # reads may take well over the 5 s pop, yet a dead connection still fails within 15 s.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15, "socket_connect_timeout": 5}]},
        }
    }
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    # Embedded broker: kombu's filesystem transport, one folder shared by all local processes.
    BROKER_DIR = VAR_DIR / "broker"
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR),
        "data_folder_out": str(BROKER_DIR),
        "control_folder": str(VAR_DIR / "broker-control"),
    }
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# At-least-once delivery (docs/architecture.md#delivery-guarantees): a message is acknowledged
# only after the task finished; a worker killed mid-task gets its message redelivered.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# No result per delivery task (a row per run at thousands of runs/s): only the bulk operations'
# task stores its state and result (ignore_result=False on it), in django-celery-results' table.
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True  # the task's name and arguments in its TaskResult row (the admin shows them)
# Bulk operations run on their own queue and worker (Procfile `ops`), never on the delivery queues.
CELERY_TASK_ROUTES = {"operations.*": {"queue": "ops"}}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "runs.default"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
if REDIS_URL:
    # Must exceed the longest job timeout plus lease slack, or Redis redelivers a task that is
    # still running (celery/kombu#337).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

EMAIL_CONFIG = env.email_url("EMAIL_URL", default="consolemail://")
vars().update(EMAIL_CONFIG)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Chime <chime@localhost>")

# --- REST API -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["apps.api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["apps.api.permissions.IsTenantAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["apps.api.parsers.LimitedJSONParser"],
    "EXCEPTION_HANDLER": "apps.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["apps.api.throttling.TenantRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
# Request bodies above this get 413 (a job with its webhook body is far smaller).
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("CHIME_API_MAX_BODY_BYTES", default=256 * 1024)
# ... except POST /api/v1/jobs/batch: up to 1,000 jobs (docs/api.md#batch-create).
CHIME_API_MAX_BATCH_BODY_BYTES = env.int("CHIME_API_MAX_BATCH_BODY_BYTES", default=8 * 1024 * 1024)
SPECTACULAR_SETTINGS = {
    "TITLE": "Chime API",
    "DESCRIPTION": "Distributed cron with webhooks you cannot lose. See docs/api.md.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "apps.jobs.models.RunStatus",
        "JobStatusEnum": "apps.jobs.models.JobStatus",
        "ArchiveKindEnum": "apps.history.models.ArchiveKind",
    },
}

# --- Chime ----------------------------------------------------------------------------------
# Webhook targets resolving to private, loopback or link-local addresses are refused unless set.
WEBHOOK_ALLOW_PRIVATE_NETWORKS = env.bool("WEBHOOK_ALLOW_PRIVATE_NETWORKS", default=False)
# Number of scheduler partitions; fixed for the life of a database (a definition's partition is
# derived from its id). Shards own partitions; see docs/architecture.md#sharding.
CHIME_PARTITIONS = env.int("CHIME_PARTITIONS", default=64)
CHIME_SCHEDULER_BATCH_SIZE = env.int("CHIME_SCHEDULER_BATCH_SIZE", default=1000)
CHIME_SCHEDULER_IDLE_SECONDS = env.float("CHIME_SCHEDULER_IDLE_SECONDS", default=0.2)

# --- metrics (apps/metrics, docs/operations.md#metrics) ---------------------------------------
# The web's GET /metrics needs "Authorization: Bearer <token>"; empty: /metrics is off (404).
CHIME_METRICS_TOKEN = env.str("CHIME_METRICS_TOKEN", default="")
# The worker and the scheduler serve their metrics on this port (unset: not at all), on an
# address that is not routed to the public.
CHIME_METRICS_PORT = env.int("CHIME_METRICS_PORT", default=None)
CHIME_METRICS_ADDR = env.str("CHIME_METRICS_ADDR", default="0.0.0.0")
# A tenant label on the run metrics: for small installs only (one series per tenant and label).
CHIME_METRICS_TENANT_LABEL = env.bool("CHIME_METRICS_TENANT_LABEL", default=False)

# --- errors to Sentry (optional) ---------------------------------------------------------------
# SENTRY_DSN set: unhandled errors of every process go to Sentry (its Django and Celery
# integrations switch on by themselves). No personal data (send_default_pii off: no cookies, no
# Authorization header, no user), and no performance tracing (OpenTelemetry does that).
SENTRY_DSN = env.str("SENTRY_DSN", default="")
if SENTRY_DSN:
    import sentry_sdk

    sentry_sdk.init(
        dsn=SENTRY_DSN,
        environment=env.str("SENTRY_ENVIRONMENT", default="production"),
        send_default_pii=False,
        traces_sample_rate=0.0,
    )

# --- health checks (apps/core/health.py, docs/operations.md#health-checks) -------------------
# Each dependency check of /readyz and `manage.py probe` gives up after this long.
CHIME_READINESS_TIMEOUT_SECONDS = env.float("CHIME_READINESS_TIMEOUT_SECONDS", default=2.0)
# Where the scheduler and the worker touch their heartbeat files (one per process type: one
# scheduler or worker per container, as a PaaS or Kubernetes runs them).
CHIME_HEARTBEAT_DIR = env.str("CHIME_HEARTBEAT_DIR", default=str(VAR_DIR / "heartbeat"))
CHIME_HEARTBEAT_SECONDS = env.float("CHIME_HEARTBEAT_SECONDS", default=5.0)  # the worker's beat
CHIME_HEARTBEAT_MAX_AGE_SECONDS = env.float("CHIME_HEARTBEAT_MAX_AGE_SECONDS", default=30.0)
# Runs sit in "queued" this long without a worker taking them before the sweep publishes again.
# Short: under backpressure (CHIME_MAX_QUEUED_RUNS) a run waits seconds in the broker, so one
# queued for 30 s lost its message: a worker SIGKILLed with a message it had received but not
# started (Redis keeps that unacked for the whole visibility_timeout), a publisher that crashed.
# A duplicate message is harmless (the claim is a conditional flip).
CHIME_REQUEUE_AFTER = timedelta(seconds=env.int("CHIME_REQUEUE_AFTER_SECONDS", default=30))
# Run ids per Celery message: one message per run cannot keep up with a top-of-the-hour spike, and
# every message costs the worker's main process (kombu: receive, dispatch, ack) and its child (a
# read of the runs) the same whatever it carries. 200 (was 50): a 100,000 spike delivered 13 %
# more in the same time with 13 % less worker CPU per run (docs/benchmarks.md). A release of a few
# runs is still one small message; a process's window (CHIME_WORKER_MAX_IN_FLIGHT) is 200 too.
CHIME_ENQUEUE_CHUNK = env.int("CHIME_ENQUEUE_CHUNK", default=200)
CHIME_MAX_TIMEOUT_SECONDS = 900
# A claimed run's lease; the worker renews it while the request is in flight. A worker that
# stops renewing is treated as dead once it expires, whatever the job's timeout.
CHIME_RUN_LEASE_SECONDS = env.int("CHIME_RUN_LEASE_SECONDS", default=30)
CHIME_RUN_LEASE_RENEW_SECONDS = env.float("CHIME_RUN_LEASE_RENEW_SECONDS", default=10.0)
# Fairness and backpressure: a priority tier's queue holds at most this many runs; the rest of a
# burst waits in the database and is released round-robin across tenants as the queue drains.
CHIME_MAX_QUEUED_RUNS = env.int("CHIME_MAX_QUEUED_RUNS", default=2000)
# ...and is topped up once this fraction of that is free, so each release's fixed cost is spread
# over a batch worth it, or once this long passed since its last top-up, so a queue that drains
# slowly holds nobody's runs back for long (apps/scheduler/fairness.py).
CHIME_RELEASE_MIN_ROOM = env.float("CHIME_RELEASE_MIN_ROOM", default=0.25)
CHIME_RELEASE_MAX_WAIT_SECONDS = env.float("CHIME_RELEASE_MAX_WAIT_SECONDS", default=1.0)
# Partition leases: a dead scheduler's partitions are taken over within TTL + refresh interval.
CHIME_LEASE_TTL_SECONDS = env.int("CHIME_LEASE_TTL_SECONDS", default=10)
CHIME_LEASE_REFRESH_SECONDS = env.float("CHIME_LEASE_REFRESH_SECONDS", default=3.0)
# Materialize runs this far ahead of their fire time, so releasing them on time is one cheap flip.
CHIME_SCHEDULER_LOOKAHEAD_SECONDS = env.float("CHIME_SCHEDULER_LOOKAHEAD_SECONDS", default=2.0)
# Misfires (docs/time-semantics.md#misfires): an occurrence later than GRACE is "missed" and its
# job's misfire_policy applies; nothing older than LOOKBACK is materialized individually.
CHIME_MISFIRE_GRACE_SECONDS = env.int("CHIME_MISFIRE_GRACE_SECONDS", default=60)
CHIME_MISFIRE_LOOKBACK_SECONDS = env.int("CHIME_MISFIRE_LOOKBACK_SECONDS", default=24 * 3600)
# How often each scheduler runs the recovery sweeps (stale queued runs, expired leases).
CHIME_SWEEP_INTERVAL_SECONDS = env.float("CHIME_SWEEP_INTERVAL_SECONDS", default=5.0)
# Worker shutdown (apps/delivery/draining.py): on SIGTERM, requests in flight get this long to
# finish before they are cancelled and their runs handed back; keep it under the platform's kill
# timeout (30 s on most PaaS) minus the time to record outcomes.
CHIME_WORKER_SHUTDOWN_GRACE_SECONDS = env.float("CHIME_WORKER_SHUTDOWN_GRACE_SECONDS", default=20.0)
# A worker rides out a database outage this long while it holds claimed runs or unrecorded
# outcomes (apps/core/dbretry.py); past it, the runs' leases expire and the sweep takes over.
CHIME_WORKER_DB_RETRY_SECONDS = env.float("CHIME_WORKER_DB_RETRY_SECONDS", default=120.0)

# Delivery window (apps/delivery/window.py, docs/architecture.md#the-delivery-window): requests in
# flight per worker process, and the share one tenant or one endpoint host may hold of them. A
# tenant's share of 50 gives ~150 runs/s against an endpoint with a 150 ms median (p99 2 s) while
# a tenant whose endpoint hangs holds at most a quarter of the window. Runs over their share wait
# parked in memory (still `queued`), at most CHIME_WORKER_MAX_PARKED per process.
CHIME_WORKER_MAX_IN_FLIGHT = env.int("CHIME_WORKER_MAX_IN_FLIGHT", default=200)
CHIME_WORKER_MAX_IN_FLIGHT_PER_TENANT = env.int("CHIME_WORKER_MAX_IN_FLIGHT_PER_TENANT", default=50)
CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST = env.int("CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST", default=50)
# Parked runs cost ~300 bytes each; the default is all the scheduler lets the three tiers' queues
# hold (CHIME_MAX_QUEUED_RUNS each), so one process can park whatever it is given. A run past it
# goes back to the broker after CHIME_WORKER_OVERFLOW_SECONDS, for whichever process has room.
CHIME_WORKER_MAX_PARKED = env.int("CHIME_WORKER_MAX_PARKED", default=3 * CHIME_MAX_QUEUED_RUNS)
CHIME_WORKER_OVERFLOW_SECONDS = env.float("CHIME_WORKER_OVERFLOW_SECONDS", default=1.0)

# --- Scheduler: failing steps hand partitions over (issue #10) -------------------------------
# apps/scheduler/leases.py StepFailures: after this many failed steps
# in a row a scheduler releases its partitions and takes none for STAND_DOWN seconds (doubled on
# each stand-down without a working step, up to MAX), so a healthy scheduler takes over. 0: never.
CHIME_SCHEDULER_MAX_FAILED_STEPS = env.int("CHIME_SCHEDULER_MAX_FAILED_STEPS", default=5)
CHIME_SCHEDULER_STAND_DOWN_SECONDS = env.float("CHIME_SCHEDULER_STAND_DOWN_SECONDS", default=30.0)
CHIME_SCHEDULER_MAX_STAND_DOWN_SECONDS = env.float("CHIME_SCHEDULER_MAX_STAND_DOWN_SECONDS", default=600.0)

# --- Tenant quotas and fair limits (apps/tenants/quotas.py, docs/api.md#limits-and-quotas) ----------
# Defaults for every tenant; staff override them per tenant in the admin (Tenant -> limits).
# API requests per tenant, all its keys together, in any sliding window of the period (Redis).
CHIME_API_RATE_LIMIT = env.str("CHIME_API_RATE_LIMIT", default="1200/min")
CHIME_QUOTA_MAX_JOBS = env.int("CHIME_QUOTA_MAX_JOBS", default=1000)  # not deleted, not completed
CHIME_QUOTA_MAX_API_KEYS = env.int("CHIME_QUOTA_MAX_API_KEYS", default=10)  # not revoked
CHIME_QUOTA_MAX_BACKFILL_RUNS = env.int("CHIME_QUOTA_MAX_BACKFILL_RUNS", default=100)  # per request
CHIME_QUOTA_TRIGGERS_PER_MINUTE = env.int("CHIME_QUOTA_TRIGGERS_PER_MINUTE", default=30)
CHIME_QUOTA_MIN_RETRY_BACKOFF_SECONDS = env.int("CHIME_QUOTA_MIN_RETRY_BACKOFF_SECONDS", default=5)
CHIME_QUOTA_MAX_RETRY_ATTEMPTS = env.int("CHIME_QUOTA_MAX_RETRY_ATTEMPTS", default=10)
CHIME_QUOTA_MAX_LIVE_CONNECTIONS = env.int("CHIME_QUOTA_MAX_LIVE_CONNECTIONS", default=20)  # dashboard sockets
# Every POST of the login form and of the password-reset form counts, per account name (existing
# or not) and per client address; "N/period" as in "10/15min".
CHIME_LOGIN_RATE_PER_ACCOUNT = env.str("CHIME_LOGIN_RATE_PER_ACCOUNT", default="10/15min")
CHIME_LOGIN_RATE_PER_ADDRESS = env.str("CHIME_LOGIN_RATE_PER_ADDRESS", default="50/15min")
CHIME_PASSWORD_RESET_RATE_PER_ACCOUNT = env.str("CHIME_PASSWORD_RESET_RATE_PER_ACCOUNT", default="3/hour")
CHIME_PASSWORD_RESET_RATE_PER_ADDRESS = env.str("CHIME_PASSWORD_RESET_RATE_PER_ADDRESS", default="20/hour")
CHIME_SIGNUP_RATE_PER_ADDRESS = env.str("CHIME_SIGNUP_RATE_PER_ADDRESS", default="10/hour")
# Proxies in front of the web process that append the client's address to X-Forwarded-For: 0
# here (REMOTE_ADDR is the client); config/settings/production.py defaults to 1 (the PaaS router).
CHIME_TRUSTED_PROXY_HOPS = env.int("CHIME_TRUSTED_PROXY_HOPS", default=0)

# Header secrecy (apps/jobs/secrets.py): Fernet keys for target header values at rest, comma
# separated; the first encrypts, every one decrypts (rotation: put a new key first, run
# `manage.py rotate_field_keys`, then drop the old one). Empty: a key derived from SECRET_KEY.
CHIME_FIELD_ENCRYPTION_KEYS = env.list("CHIME_FIELD_ENCRYPTION_KEYS", default=[])

# --- bulk operations (apps/operations, docs/architecture.md#bulk-operations) -----------------
# Runs (or occurrences) per chunk: each chunk is one transaction, its effect and its progress.
CHIME_OPERATION_CHUNK_SIZE = env.int("CHIME_OPERATION_CHUNK_SIZE", default=500)
# A pause between chunks: a 100,000-run replay feeds the delivery queues at a bounded pace
# instead of making every run due at once, ahead of every other tenant's runs.
CHIME_OPERATION_CHUNK_PAUSE_SECONDS = env.float("CHIME_OPERATION_CHUNK_PAUSE_SECONDS", default=0.1)
# An operation's lease, renewed at every chunk: a worker killed mid-operation lets it lapse, and
# the ops worker's sweep (every CHIME_OPERATION_SWEEP_SECONDS) sends the operation again.
CHIME_OPERATION_LEASE_SECONDS = env.float("CHIME_OPERATION_LEASE_SECONDS", default=60.0)
CHIME_OPERATION_SWEEP_SECONDS = env.float("CHIME_OPERATION_SWEEP_SECONDS", default=15.0)
