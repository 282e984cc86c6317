"""Canon settings: every knob is read from the environment here, and only here."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import dbpool

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


# DEBUG is a developer's explicit choice (DEBUG=1): off, error pages list no URL patterns and
# show no code.
DEBUG = env_bool("DEBUG", False)
# SECRET_KEY from the environment (production), else the key file `make run` / `make test`
# generate once and keep (devtools.devstack.ensure_secret_key). Never a built-in key with DEBUG off.
SECRET_KEY_FILE = Path(env_str("CANON_SECRET_KEY_FILE", str(BASE_DIR / ".data" / "secret_key")))
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY and SECRET_KEY_FILE.is_file():
    SECRET_KEY = SECRET_KEY_FILE.read_text().strip()
if not SECRET_KEY and DEBUG:
    SECRET_KEY = "canon-insecure-development-key-change-me"  # noqa: S105 (DEBUG only)
if not SECRET_KEY:
    raise ImproperlyConfigured(
        f"Set SECRET_KEY, or create {SECRET_KEY_FILE} (make run and make test generate it), "
        "or set DEBUG=1 for a development key."
    )
# CANON_LOCAL_HTTP=1 (what `make run` sets): plain HTTP on loopback, so the HTTPS-only settings
# below are off and only loopback names are served. Without it, DEBUG off means HTTPS.
LOCAL_HTTP = env_bool("CANON_LOCAL_HTTP", False)
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
ALLOWED_HOSTS = [h for h in env_str("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
if LOCAL_HTTP and set(ALLOWED_HOSTS) - set(LOOPBACK_HOSTS):
    raise ImproperlyConfigured(
        "CANON_LOCAL_HTTP serves plain HTTP to loopback only; ALLOWED_HOSTS may name only "
        f"{', '.join(LOOPBACK_HOSTS)}. Serve other hosts over HTTPS (docs/PRODUCTION.md)."
    )
CSRF_TRUSTED_ORIGINS = [o for o in env_str("CSRF_TRUSTED_ORIGINS", "").split(",") if o]
# Production (DEBUG off) is served over HTTPS, usually behind a proxy that sets X-Forwarded-Proto.
HTTPS = not DEBUG and not LOCAL_HTTP
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", HTTPS)
# Probes and scrapers reach a web process directly over HTTP, not through the TLS proxy.
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz|metrics)$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
# Override both when some subdomain must stay plain HTTP.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", HTTPS)
if env_bool("BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# `check --deploy` warns about exactly the HTTPS settings local HTTP turns off (HSTS, redirect,
# secure session and CSRF cookies); they cannot hold on plain HTTP, so only they are silenced.
SILENCED_SYSTEM_CHECKS = (
    ["security.W004", "security.W008", "security.W012", "security.W016"] if LOCAL_HTTP else []
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "config.apps.CanonConfig",
    "work",
    "kb",
    "ingestion",
    "retrieval",
    "sources",
    "evaluation",
    "identity",
    "djangosaml2",
    "console",
]

MIDDLEWARE = [
    # Outermost: the errors of /api/dify/ and /api/openai/ in those APIs' shapes
    # (retrieval/compat/middleware.py), after the next one made every error under /api/ JSON.
    "retrieval.compat.middleware.CompatErrorsMiddleware",
    # Every error under /api/ is JSON, with DEBUG on or off (retrieval/api/errors.py).
    "retrieval.api.errors.ApiErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files from STATIC_ROOT (collectstatic), compressed and cached forever by hash.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # The admin in the person's language (the switcher's cookie, else the browser's); every
    # other path, the APIs above all, in LANGUAGE_CODE (console/locale.py). Before the body
    # limit, so its refusal page is in that language too; it reads no session and no body.
    "console.locale.AdminLocaleMiddleware",
    # Before anything reads a body (CSRF reads the admin's forms): refuse what is too large.
    "kb.uploads.RequestBodyLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # SAML's own session (djangosaml2: the requests sent to the provider); touches nothing until
    # a SAML view uses it.
    "djangosaml2.middleware.SamlSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # A session signed in through the identity provider is re-checked with it every
    # CANON_IDENTITY_RECHECK_MINUTES, and ends when the provider ended it (identity/recheck.py).
    "identity.middleware.SessionRecheckMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

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

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", "postgresql://postgres@127.0.0.1:54329/canon"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
        conn_health_checks=True,
    )
}
# Named per process so operators (and crash tests) can find a process's backends.
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = env_str(
    "CANON_DB_APPLICATION_NAME", f"canon-{os.getpid()}"
)
# Server-side parameter binding lets psycopg prepare a statement it has run 5 times on a
# connection: planning the search statement (six relations, an HNSW cost estimate) costs more
# than executing it. Turn it off behind a pooler in transaction mode (prepared statements are
# per server connection there).
if env_bool("DATABASE_SERVER_SIDE_BINDING", True):
    DATABASES["default"]["OPTIONS"].update(server_side_binding=True, prepare_threshold=5)
# A session idle inside a transaction (a host cut off mid-transaction, a stuck process) keeps
# its row locks until PostgreSQL ends it, and a vanished client keeps its session (and the
# singletons' advisory locks) until TCP notices: bound both here rather than trust the server's
# configuration (docs/SCALING.md). A backup's snapshot transaction lifts the first for itself.
DB_IDLE_IN_TRANSACTION_SECONDS = env_int("CANON_DB_IDLE_IN_TRANSACTION_SECONDS", 60)
# How every session walks an HNSW index (only searches do): pgvector's iterative scan, so
# filters (tenant, access groups, deleted documents) never leave a result short while visible
# chunks remain, at ef_search 100 (top_k is at most SEARCH_MAX_TOP_K), stopping after
# SEARCH_MAX_SCAN_TUPLES index tuples (at least 20 a row asked for); when that walk finds fewer
# than top_k visible rows, the exact form answers (cheap, since then few chunks are visible).
# Session settings, not a SET in each search's transaction: a vector search is then one
# statement and one round trip (retrieval/search/vector.py).
SEARCH_MAX_TOP_K = 100
# How many knowledge bases one search may read (`kb` as a list).
SEARCH_MAX_KBS = 10
SEARCH_EF = 100
SEARCH_MAX_SCAN_TUPLES = max(env_int("CANON_SEARCH_MAX_SCAN_TUPLES", 4000), 20 * SEARCH_MAX_TOP_K)
# Canon's go first, so `options` given in DATABASE_URL (`?options=...`) still win.
DATABASES["default"]["OPTIONS"]["options"] = " ".join(
    [
        f"-c idle_in_transaction_session_timeout={DB_IDLE_IN_TRANSACTION_SECONDS * 1000}",
        "-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3",
        f"-c hnsw.iterative_scan=strict_order -c hnsw.ef_search={SEARCH_EF}",
        f"-c hnsw.max_scan_tuples={SEARCH_MAX_SCAN_TUPLES}",
        str(DATABASES["default"]["OPTIONS"].get("options", "")),
    ]
).strip()
# The web server's processes borrow connections from a pool of their own, one per thread
# (CANON_DB_POOL, which config/gunicorn.conf.py turns on; config/dbpool.py says why workers do
# not). A pool and persistent connections exclude each other. The statements prepared on a
# pooled connection stay prepared for the next request that borrows it.
CANON_DB_POOL = dbpool.pool_settings(os.environ)
if CANON_DB_POOL.enabled:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"]["pool"] = CANON_DB_POOL.options()
# What every Canon process together may open, against what PostgreSQL allows (system check
# canon.E010; docs/PRODUCTION.md "Sizing the database connections").
CANON_DB_BUDGET = dbpool.connection_budget(os.environ, pool=CANON_DB_POOL)
# Threads per process that read a hybrid search's index walks (the vector leg's, the English
# list's) on connections of their own, in its snapshot, while it reads its keyword leg
# (retrieval/search/shared_snapshot.py; B9 with the English list); 0 reads them in series.
# Counted in the budget above.
SEARCH_SNAPSHOT_READERS = dbpool.snapshot_readers(os.environ)
CANON_DB_MAX_CONNECTIONS = (
    env_int("CANON_DB_MAX_CONNECTIONS", 0) if os.environ.get("CANON_DB_MAX_CONNECTIONS") else None
)
# A streaming replica (hot standby) of DATABASE_URL that the API's searches read
# (retrieval/routing.py says what goes where; docs/PRODUCTION.md "Read replicas"). It takes
# default's connection options (pool, binding, application name) as they stand here. In tests
# it mirrors default: no test database is created on a standby.
SEARCH_REPLICA_URL = env_str("CANON_SEARCH_REPLICA_URL", "")
SEARCH_DATABASE = "default"
if SEARCH_REPLICA_URL:
    import copy

    _replica: dict[str, object] = dict(copy.deepcopy(DATABASES["default"]))
    _parsed = dj_database_url.parse(SEARCH_REPLICA_URL)
    _replica.update({key: _parsed.get(key) for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT")})
    _replica["TEST"] = {"MIRROR": "default"}
    DATABASES["replica"] = _replica  # type: ignore[assignment]
    SEARCH_DATABASE = "replica"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
# The admin speaks English and Simplified Chinese (locale/zh_Hans, docs/ADMIN_GUIDE.md
# "Language"): chosen by the switcher in its header (a cookie kept a year), else the browser.
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SECURE = HTTPS
USE_TZ = True
# Moments to the second everywhere in the admin ("2026-12-01 11:13:05 UTC"): config/formats/.
FORMAT_MODULE_PATH = ["config.formats"]
STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("CANON_STATIC_ROOT", str(BASE_DIR / ".data" / "static")))
# `collectstatic` (make run runs it) writes hashed, compressed copies that WhiteNoise serves.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# --- uploads and storage -------------------------------------------------------------------
STORAGE_ROOT = Path(env_str("CANON_STORAGE_ROOT", str(BASE_DIR / ".data" / "storage")))
# Stored files in an S3-compatible bucket instead (kb/storage/s3.py): s3://bucket/prefix. The
# endpoint, region and credentials come from boto3's own environment (AWS_ENDPOINT_URL,
# AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or an instance role); empty: the
# directory CANON_STORAGE_ROOT (docs/PRODUCTION.md, "Stored files in a bucket").
STORAGE_URL = env_str("CANON_STORAGE_URL", "")
S3_ADDRESSING_STYLE = env_str("CANON_S3_ADDRESSING_STYLE", "auto")  # path for MinIO and moto
S3_CONNECT_TIMEOUT_SECONDS = env_float("CANON_S3_CONNECT_TIMEOUT_SECONDS", 3.0)
S3_READ_TIMEOUT_SECONDS = env_float("CANON_S3_READ_TIMEOUT_SECONDS", 30.0)
S3_MAX_ATTEMPTS = env_int("CANON_S3_MAX_ATTEMPTS", 3)
# Where canon_backup / canon_restore look first for pg_dump and pg_restore (docs/BACKUP.md).
PG_BIN_DIR = env_str("CANON_PG_BIN_DIR", "")
UPLOAD_MAX_BYTES = env_int("CANON_UPLOAD_MAX_BYTES", 50 * 1024 * 1024)

# Sources (sources/, docs/ADMIN_GUIDE.md "Sources"). Credentials are encrypted with
# CANON_SOURCES_KEY (Fernet keys, comma-separated, the first encrypts: rotation), else the key
# file make run / make test generate; with neither, a source cannot be given credentials.
SOURCES_KEY = env_str("CANON_SOURCES_KEY", "")
SOURCES_KEY_FILE = Path(env_str("CANON_SOURCES_KEY_FILE", str(BASE_DIR / ".data" / "sources_key")))
if not SOURCES_KEY and SOURCES_KEY_FILE.is_file():
    SOURCES_KEY = SOURCES_KEY_FILE.read_text().strip()
# Loopback, link-local and private addresses are refused unless this is set (sources.network).
SOURCES_ALLOW_PRIVATE = env_bool("CANON_SOURCES_ALLOW_PRIVATE", False)
SOURCES_MAX_ITEM_BYTES = env_int("CANON_SOURCES_MAX_ITEM_BYTES", UPLOAD_MAX_BYTES)
SOURCES_MAX_ITEMS = env_int("CANON_SOURCES_MAX_ITEMS", 100_000)
SOURCES_TIMEOUT_SECONDS = env_float("CANON_SOURCES_TIMEOUT_SECONDS", 30.0)
# The server folders folder sources may read, os.pathsep-separated (none: no folder sources), so
# a source can never be pointed at the server's own files (its keys under .data, /etc).
SOURCES_FOLDER_ROOTS = [
    root for root in env_str("CANON_SOURCES_FOLDER_ROOTS", "").split(os.pathsep) if root.strip()
]
# Where a kind keeps things between runs (a Git clone), one directory per source.
SOURCES_CACHE_ROOT = Path(env_str("CANON_SOURCES_CACHE_ROOT", str(BASE_DIR / ".data" / "sources")))
# A run holds its deletions for confirmation only when they exceed the source's threshold share
# *and* this many documents: deleting 1 file of 3 is an ordinary day.
SOURCES_DELETE_HOLD_MIN = env_int("CANON_SOURCES_DELETE_HOLD_MIN", 5)
UPLOAD_MAX_FILES = env_int("CANON_UPLOAD_MAX_FILES", 20)
# Larger uploads stream to a temporary file instead of memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
DATA_UPLOAD_MAX_NUMBER_FILES = UPLOAD_MAX_FILES
FILE_UPLOAD_HANDLERS = [
    "kb.uploads.OversizedUploadHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

# --- pipeline ------------------------------------------------------------------------------
# `canon_bootstrap` (make run) uploads the sample handbook (console/demo) into an empty demo
# knowledge base once, so search has something to find; CANON_DEMO_DOCUMENTS=0 skips it.
DEMO_DOCUMENTS = env_bool("CANON_DEMO_DOCUMENTS", True)
EMBEDDING_PROVIDER = env_str("CANON_EMBEDDING_PROVIDER", "hash")
EMBEDDING_MODEL = env_str("CANON_EMBEDDING_MODEL", "canon-hash-v1")
EMBEDDING_DIMENSIONS = env_int("CANON_EMBEDDING_DIMENSIONS", 384)
EMBEDDING_BATCH_SIZE = env_int("CANON_EMBEDDING_BATCH_SIZE", 64)
# New index versions embedded by `use` get the English list (a second, English-only embedding of
# the chunks not in Chinese, read as a third list by hybrid search: docs/BENCHMARKS.md "B8 with a
# third list") unless this is off or the person creating the version unticks it.
ENGLISH_LIST_DEFAULT = env_bool("CANON_ENGLISH_LIST", True)
CHUNK_SIZE = env_int("CANON_CHUNK_SIZE", 800)  # characters
CHUNK_OVERLAP = env_int("CANON_CHUNK_OVERLAP", 100)  # characters
CHUNK_WRITE_BATCH = env_int("CANON_CHUNK_WRITE_BATCH", 200)
PARSE_MAX_CHARS = env_int("CANON_PARSE_MAX_CHARS", 20_000_000)
# OCR of images and of PDF pages without a text layer (textkit.extract.ocr), in the worker's parse
# stage, as each knowledge base's `ocr_mode` says. CANON_OCR=off turns it off in this process for
# every knowledge base (its engine is never loaded; images fail, PDF pages without text are
# skipped), as does CANON_OCR_MAX_PAGES=0; where it is on, each worker child loads the engine at
# start. Then: onnxruntime threads per worker child (children x threads <= cores, as for
# embedding), pages and seconds per document (past either the build fails, saying which), pixels
# per image (larger is refused before decoding) and the confidence below which a recognised line
# is dropped.
_OCR_SWITCH = env_str("CANON_OCR", "on").strip().lower()
if _OCR_SWITCH not in ("on", "off", "1", "0", "true", "false", "yes", "no"):
    raise ImproperlyConfigured(f"CANON_OCR must be on or off, not {_OCR_SWITCH!r}")
OCR_ENABLED = _OCR_SWITCH in ("on", "1", "true", "yes")
OCR_THREADS = max(1, env_int("CANON_OCR_THREADS", 1))
OCR_MAX_PAGES = env_int("CANON_OCR_MAX_PAGES", 100)
OCR_MAX_SECONDS = env_float("CANON_OCR_MAX_SECONDS", 600.0)
OCR_MAX_PIXELS = env_int("CANON_OCR_MAX_PIXELS", 50_000_000)
OCR_MIN_CONFIDENCE = env_float("CANON_OCR_MIN_CONFIDENCE", 0.5)
# Seconds from a delete to physical cleanup; unset means the knowledge base's retention window.
DELETE_PURGE_DELAY_SECONDS = (
    env_float("CANON_DELETE_PURGE_DELAY_SECONDS", 0.0)
    if "CANON_DELETE_PURGE_DELAY_SECONDS" in os.environ
    else None
)

# --- leases, retries, relay ----------------------------------------------------------------
LEASE_TTL_SECONDS = env_float("CANON_LEASE_TTL_SECONDS", 60.0)
TASK_MAX_ATTEMPTS = env_int("CANON_TASK_MAX_ATTEMPTS", 5)
RETRY_BASE_SECONDS = env_float("CANON_RETRY_BASE_SECONDS", 2.0)
RETRY_MAX_SECONDS = env_float("CANON_RETRY_MAX_SECONDS", 300.0)
RELAY_BATCH_SIZE = env_int("CANON_RELAY_BATCH_SIZE", 500)
RELAY_INTERVAL_SECONDS = env_float("CANON_RELAY_INTERVAL_SECONDS", 1.0)
RELAY_MAX_ATTEMPTS = env_int("CANON_RELAY_MAX_ATTEMPTS", 10)
# The reconciler reports outbox events unpublished this long, and removes stored files that no
# revision names once they are this old (an upload that crashed before its commit).
RECONCILER_OUTBOX_LAG_SECONDS = env_float("CANON_RECONCILER_OUTBOX_LAG_SECONDS", 60.0)
RECONCILER_ORPHAN_GRACE_SECONDS = env_float("CANON_RECONCILER_ORPHAN_GRACE_SECONDS", 3600.0)
# A task whose message went out this long ago, never claimed, with the broker's queue empty, is
# sent again (its message died with a worker or with Redis; see ingestion.reconciler).
RECONCILER_UNCLAIMED_SECONDS = env_float("CANON_RECONCILER_UNCLAIMED_SECONDS", 120.0)
# The reconciler's bounded levels per pass (kb.audit; docs/ARCHITECTURE.md "Reconciliation"):
# chunks read to seal new builds, documents of the walk, builds summarised, windows deep-checked.
RECONCILER_SEAL_CHUNKS = env_int("CANON_RECONCILER_SEAL_CHUNKS", 50_000)
RECONCILER_SLICE_DOCUMENTS = env_int("CANON_RECONCILER_SLICE_DOCUMENTS", 100)
RECONCILER_SHARD_BUILDS = env_int("CANON_RECONCILER_SHARD_BUILDS", 5_000)
RECONCILER_DEEP_WINDOWS = env_int("CANON_RECONCILER_DEEP_WINDOWS", 4)
AUDIT_WINDOW_BUILDS = env_int("CANON_AUDIT_WINDOW_BUILDS", 64)  # builds per shard window

# --- embedding providers (README: "Pointing Canon at a real embedding service") ------------
# An IndexVersion pins provider, model and dimensions; these say how to reach the service.
# The API key comes from the environment only: it is never written to the database or logged.
OPENAI_BASE_URL = env_str("CANON_OPENAI_BASE_URL", "https://api.openai.com/v1")
OPENAI_API_KEY = env_str("CANON_OPENAI_API_KEY", "")
# Send `dimensions` in the request (OpenAI text-embedding-3-* can shorten its vectors).
OPENAI_SEND_DIMENSIONS = env_bool("CANON_OPENAI_SEND_DIMENSIONS", False)
PROVIDER_CONNECT_TIMEOUT_SECONDS = env_float("CANON_PROVIDER_CONNECT_TIMEOUT_SECONDS", 5.0)
PROVIDER_READ_TIMEOUT_SECONDS = env_float("CANON_PROVIDER_READ_TIMEOUT_SECONDS", 30.0)
PROVIDER_TOTAL_TIMEOUT_SECONDS = env_float("CANON_PROVIDER_TOTAL_TIMEOUT_SECONDS", 40.0)
PROVIDER_MAX_ATTEMPTS = max(1, env_int("CANON_PROVIDER_MAX_ATTEMPTS", 4))
PROVIDER_BACKOFF_BASE_SECONDS = env_float("CANON_PROVIDER_BACKOFF_BASE_SECONDS", 0.5)
PROVIDER_BACKOFF_MAX_SECONDS = env_float("CANON_PROVIDER_BACKOFF_MAX_SECONDS", 8.0)
# All attempts of one batch, waits included, end well inside the lease (clipped to 3/4 of it).
PROVIDER_BUDGET_SECONDS = min(
    env_float("CANON_PROVIDER_BUDGET_SECONDS", 45.0), 0.75 * LEASE_TTL_SECONDS
)
assert 0 < PROVIDER_BUDGET_SECONDS < LEASE_TTL_SECONDS, "provider budget must be below the lease"
# The circuit breaker, shared by all workers through Redis: opens after THRESHOLD consecutive
# failures, then lets one probe through every COOLDOWN seconds.
BREAKER_THRESHOLD = max(1, env_int("CANON_BREAKER_THRESHOLD", 5))
BREAKER_COOLDOWN_SECONDS = env_float("CANON_BREAKER_COOLDOWN_SECONDS", 30.0)
BREAKER_KEY_PREFIX = env_str("CANON_BREAKER_KEY_PREFIX", "canon:breaker")
# sentence-transformers (optional extra `local-models`): models are loaded from here, never
# downloaded.
LOCAL_MODELS_DIR = env_str("CANON_LOCAL_MODELS_DIR", str(BASE_DIR / ".data" / "models"))
LOCAL_MODEL_DEVICE = env_str("CANON_LOCAL_MODEL_DEVICE", "cpu")
# Local models (`use`, `sentence-transformers`): load these `provider/model` entries when a web
# process or a Celery worker child starts, not on the first query (`make run` sets it for web
# and worker); and the BLAS threads each process may use (worker children x threads <= cores).
PRELOAD_EMBEDDING_MODELS = [
    entry.strip()
    for entry in env_str("CANON_PRELOAD_EMBEDDING_MODELS", "").split(",")
    if entry.strip()
]
EMBEDDING_THREADS = max(1, env_int("CANON_EMBEDDING_THREADS", 1))

# --- Celery (see docs/ARCHITECTURE.md, "Celery settings") ----------------------------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = env_str("CANON_QUEUE", "canon")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Pool children per `celery worker` (each loads the local embedding model); make run uses 2.
CELERY_WORKER_CONCURRENCY = env_int("CANON_WORKER_CONCURRENCY", os.cpu_count() or 1)
# A pool child loads its embedding models before it reports up (CANON_PRELOAD_EMBEDDING_MODELS,
# a few seconds on a busy machine); Celery's default of 4 s would kill and restart it forever.
CELERY_WORKER_PROC_ALIVE_TIMEOUT = env_float("CANON_WORKER_PROC_ALIVE_TIMEOUT", 60.0)
CELERY_TASK_TIME_LIMIT = env_int("CANON_TASK_TIME_LIMIT", 1800)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 60
# Longer than the hard time limit, so the broker never redelivers a task that is still running.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_TASK_TIME_LIMIT + 600}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULER = "config.beat:Scheduler"  # keeps each job's clock across restarts

# --- API -------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "retrieval.api.auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["retrieval.api.auth.HasPrincipal"],
    "DEFAULT_RENDERER_CLASSES": ["retrieval.api.errors.ApiJSONRenderer"],
    # Bounded size and depth, UTF-8 only, no NUL or unpaired surrogate (retrieval/api/parsers.py).
    "DEFAULT_PARSER_CLASSES": ["retrieval.api.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "retrieval.api.views.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["retrieval.api.throttling.PrincipalRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SEARCH_MAX_QUERY_CHARS = env_int("CANON_SEARCH_MAX_QUERY_CHARS", 4000)
# A new index version's vector index is built after its chunks (kb.ann_build), in one session
# with this much memory (the graph should fit) and this many parallel maintenance workers; a
# version of at most ANN_BUILD_INLINE_CHUNKS chunks is built by the worker that wrote its last
# build, a larger one by its own task.
ANN_BUILD_MAINTENANCE_WORK_MEM = env_str("CANON_ANN_BUILD_MAINTENANCE_WORK_MEM", "1GB")
ANN_BUILD_PARALLEL_WORKERS = env_int("CANON_ANN_BUILD_PARALLEL_WORKERS", 2)
ANN_BUILD_INLINE_CHUNKS = env_int("CANON_ANN_BUILD_INLINE_CHUNKS", 20000)
# Postings of each query term the keyword leg reads best-first before it ranks the candidates
# exactly; a scope that finds fewer than top_k visible among them reads eight times deeper.
KEYWORD_CANDIDATES = env_int("CANON_KEYWORD_CANDIDATES", 1000)
# How mode=hybrid fuses its legs (`retrieval.search.fusion`): "learned" (the fitted model),
# "convex" or "rrf", and the vector leg's weight for the last two (the keyword leg has
# 1 - weight). Chosen by bench/quality on its tuning questions; see docs/BENCHMARKS.md.
HYBRID_FUSION = env_str("CANON_HYBRID_FUSION", "learned")
if HYBRID_FUSION not in ("learned", "convex", "rrf"):
    raise ImproperlyConfigured(
        f"CANON_HYBRID_FUSION must be learned, convex or rrf, not {HYBRID_FUSION!r}"
    )
HYBRID_VECTOR_WEIGHT = float(env_str("CANON_HYBRID_VECTOR_WEIGHT", "0.15"))
# A reranker after hybrid fusion (`retrieval.search.rerank`, README "Reranking"): off while
# CANON_RERANK_URL is empty. It scores the first RERANK_CANDIDATES fused hits; a reranker that
# fails or is slower than RERANK_TIMEOUT_SECONDS leaves the fused order (`reranked: false`).
RERANK_URL = env_str("CANON_RERANK_URL", "").strip().rstrip("/")
RERANK_PROTOCOL = env_str("CANON_RERANK_PROTOCOL", "tei").strip()
RERANK_MODEL = env_str("CANON_RERANK_MODEL", "").strip()  # sent by `cohere`
RERANK_API_KEY = env_str("CANON_RERANK_API_KEY", "")  # never logged, like CANON_OPENAI_API_KEY
try:
    RERANK_TIMEOUT_SECONDS = env_float("CANON_RERANK_TIMEOUT", 2.0)
    RERANK_CANDIDATES = env_int("CANON_RERANK_CANDIDATES", 30)
except ValueError as exc:
    raise ImproperlyConfigured(
        f"CANON_RERANK_TIMEOUT must be a number of seconds and CANON_RERANK_CANDIDATES a whole "
        f"number ({exc})"
    ) from None
if RERANK_PROTOCOL not in ("tei", "cohere"):
    raise ImproperlyConfigured(
        f"CANON_RERANK_PROTOCOL must be tei or cohere, not {RERANK_PROTOCOL!r}"
    )
if not 0 < RERANK_TIMEOUT_SECONDS <= 60:
    raise ImproperlyConfigured(
        f"CANON_RERANK_TIMEOUT must be more than 0 and at most 60 seconds, not "
        f"{RERANK_TIMEOUT_SECONDS!r}"
    )
if not 1 <= RERANK_CANDIDATES <= 100:
    raise ImproperlyConfigured(
        f"CANON_RERANK_CANDIDATES must be between 1 and 100, not {RERANK_CANDIDATES}"
    )
if RERANK_URL:
    # The URL is named in logs, errors and the breaker's name: no credentials in it, and an
    # error here does not repeat it.
    _rerank_url = urlsplit(RERANK_URL)
    if "@" in _rerank_url.netloc:
        raise ImproperlyConfigured(
            "CANON_RERANK_URL must not carry credentials; put the key in CANON_RERANK_API_KEY"
        )
    if _rerank_url.scheme not in ("http", "https") or not _rerank_url.hostname:
        raise ImproperlyConfigured(
            "CANON_RERANK_URL must be an http or https URL such as http://tei:8080"
        )
    if RERANK_PROTOCOL == "cohere" and not RERANK_MODEL:
        raise ImproperlyConfigured(
            "CANON_RERANK_PROTOCOL=cohere needs CANON_RERANK_MODEL (e.g. rerank-v3.5)"
        )
# Requests per API key (or admin session user): "N/s", "N/min", "N/hour" or "N/day". Reads
# (GET, search) and writes (uploads, deletes) are counted apart (retrieval/api/throttling.py); the
# write budget is sized for bulk ingestion.
CANON_API_RATE = env_str("CANON_API_RATE", "600/min")
CANON_API_WRITE_RATE = env_str("CANON_API_WRITE_RATE", "3000/min")
# An upload's Idempotency-Key is honoured for at least this long, then garbage-collected.
IDEMPOTENCY_RETENTION_HOURS = env_int("CANON_IDEMPOTENCY_RETENTION_HOURS", 24)
# The shared cache (rate-limit counters only): losing it loses no fact. Keys are prefixed with
# the database name, so deployments (and test runs) sharing one Redis never count together.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": env_str("CANON_CACHE_URL", REDIS_URL),
        "KEY_PREFIX": env_str(
            "CANON_CACHE_KEY_PREFIX", f"canon-cache:{DATABASES['default'].get('NAME', '')}"
        ),
        "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
    }
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Canon API",
    "DESCRIPTION": "Search, explain and manage the documents of Canon's knowledge bases. "
    "Authenticate with `Authorization: Bearer <API key>`.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI's files come from the drf-spectacular-sidecar package, never from the internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No badge from the online validator either.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    # One name for the search modes, which search and evaluation runs both take.
    "ENUM_NAME_OVERRIDES": {"ModeEnum": "retrieval.search.engine.MODES"},
}

# --- sign-in and tokens (identity/; docs/PRODUCTION.md, "Sign-in and access tokens") ------
# OIDC sign-in to the admin (authorisation code flow with PKCE, mozilla-django-oidc): on when the
# issuer and the client id are set; the endpoints come from the issuer's discovery document.
OIDC_ISSUER = env_str("CANON_OIDC_ISSUER", "").strip().rstrip("/")
OIDC_CLIENT_ID = env_str("CANON_OIDC_CLIENT_ID", "")
OIDC_CLIENT_SECRET = env_str("CANON_OIDC_CLIENT_SECRET", "")  # never logged
# The sign-in button: "Sign in with <name>"; unset, "your company account" in the page's language.
OIDC_NAME = env_str("CANON_OIDC_NAME", "")
OIDC_SCOPES = env_str("CANON_OIDC_SCOPES", "openid email profile")
OIDC_USERNAME_CLAIM = env_str("CANON_OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_EMAIL_CLAIM = env_str("CANON_OIDC_EMAIL_CLAIM", "email")
OIDC_ENABLED = bool(OIDC_ISSUER and OIDC_CLIENT_ID)
# SAML 2.0 sign-in (djangosaml2 / pysaml2, which signs and checks with the xmlsec1 binary): on when
# the identity provider's metadata (a URL or a file) is set.
SAML_IDP_METADATA = env_str("CANON_SAML_IDP_METADATA", "").strip()
SAML_ENTITY_ID = env_str("CANON_SAML_ENTITY_ID", "")  # default: this server's metadata URL
SAML_NAME = env_str("CANON_SAML_NAME", "")  # unset: "your company account (SAML)", translated
SAML_USERNAME_ATTRIBUTE = env_str("CANON_SAML_USERNAME_ATTRIBUTE", "uid")
SAML_EMAIL_ATTRIBUTE = env_str("CANON_SAML_EMAIL_ATTRIBUTE", "mail")
SAML_KEY_FILE = env_str("CANON_SAML_KEY_FILE", "")  # optional: sign requests, read encrypted
SAML_CERT_FILE = env_str("CANON_SAML_CERT_FILE", "")
SAML_XMLSEC_BINARY = env_str("CANON_SAML_XMLSEC_BINARY", "/usr/bin/xmlsec1")
SAML_ENABLED = bool(SAML_IDP_METADATA)
# djangosaml2's own settings: its session cookie must reach the assertion consumer on the
# provider's cross-site POST (SameSite=None needs HTTPS; plain local HTTP keeps Lax).
SAML_SESSION_COOKIE_SAMESITE = "None" if HTTPS else "Lax"
SAML_CONFIG_LOADER = "identity.saml.sp_config"
SAML_CREATE_UNKNOWN_USER = True
SAML_ATTRIBUTE_MAPPING: dict[str, tuple[str, ...]] = {}
ACS_DEFAULT_REDIRECT_URL = "/admin/"
SAML_CSP_HANDLER = ""  # Canon sets no Content-Security-Policy of its own (no django-csp)
# How often a session signed in through the provider is re-checked with it (OIDC: its refresh
# token, or userinfo): a person disabled or taken out of a group there loses that access at
# their next request after this. SAML cannot re-check without the person: its sessions end
# after CANON_SAML_RECHECK_MINUTES and the person signs in again.
IDENTITY_RECHECK_MINUTES = env_float("CANON_IDENTITY_RECHECK_MINUTES", 5.0)
SAML_RECHECK_MINUTES = env_float("CANON_SAML_RECHECK_MINUTES", 60.0)
# The claim a new mapping row reads by default, and mapping rows for automated deployments (a
# JSON list of {"claim", "value", "tenant": slug, "role", "access_groups", "knowledge_bases":
# [slugs]}), used beside the rows the admin edits (identity.mapping).
IDENTITY_GROUPS_CLAIM = env_str("CANON_IDENTITY_GROUPS_CLAIM", "groups")
IDENTITY_MAPPING = env_str("CANON_IDENTITY_MAPPING", "")
# Local passwords: "everyone", or "superusers" (a break-glass superuser keeps hers; everyone
# else signs in through the provider).
LOCAL_PASSWORDS = env_str("CANON_LOCAL_PASSWORDS", "everyone").strip().lower()
if LOCAL_PASSWORDS not in ("everyone", "superusers"):
    raise ImproperlyConfigured(
        f"CANON_LOCAL_PASSWORDS must be everyone or superusers, not {LOCAL_PASSWORDS!r}"
    )
# Failed sign-ins (passwords and the provider's refusals) per address and per user name within
# the window; past it, sign-in is refused until the window has passed.
SIGN_IN_MAX_FAILURES = env_int("CANON_SIGN_IN_MAX_FAILURES", 10)
SIGN_IN_FAILURE_WINDOW_MINUTES = env_int("CANON_SIGN_IN_FAILURE_WINDOW_MINUTES", 15)
# OAuth 2.0 access tokens (JWT) beside API keys, on the API, the Dify and OpenAI shapes and the MCP
# server: on when the issuer and the audience are set. Checked against the issuer's JWKS (cached
# CANON_OAUTH_JWKS_CACHE_SECONDS; a key id not in it fetches it again, at most once per
# CANON_OAUTH_JWKS_MIN_REFETCH_SECONDS), for these algorithms only (never none nor HS*).
OAUTH_ISSUER = env_str("CANON_OAUTH_ISSUER", OIDC_ISSUER).strip().rstrip("/")
OAUTH_AUDIENCE = env_str("CANON_OAUTH_AUDIENCE", "").strip()
OAUTH_JWKS_URL = env_str("CANON_OAUTH_JWKS_URL", "").strip()  # default: from discovery
OAUTH_ALGORITHMS = [
    alg.strip() for alg in env_str("CANON_OAUTH_ALGORITHMS", "RS256,PS256,ES256").split(",")
]
if not OAUTH_ALGORITHMS or any(
    alg.lower() == "none" or alg.upper().startswith("HS") for alg in OAUTH_ALGORITHMS
):
    raise ImproperlyConfigured(
        "CANON_OAUTH_ALGORITHMS lists asymmetric algorithms only (RS256, PS256, ES256, ...): "
        "never none, nor HS* (a shared secret is no provider's signature)"
    )
OAUTH_LEEWAY_SECONDS = env_int("CANON_OAUTH_LEEWAY_SECONDS", 30)
OAUTH_JWKS_CACHE_SECONDS = env_int("CANON_OAUTH_JWKS_CACHE_SECONDS", 300)
OAUTH_JWKS_MIN_REFETCH_SECONDS = env_int("CANON_OAUTH_JWKS_MIN_REFETCH_SECONDS", 10)
OAUTH_TOKENS_ENABLED = bool(OAUTH_ISSUER and OAUTH_AUDIENCE)
# The MCP server's public URL (https://canon.example.com/mcp): the audience its tokens carry
# and the resource its protected-resource metadata names (default: CANON_OAUTH_AUDIENCE).
MCP_RESOURCE_URL = env_str("CANON_MCP_RESOURCE_URL", "").strip()
IDENTITY_HTTP_TIMEOUT_SECONDS = env_float("CANON_IDENTITY_HTTP_TIMEOUT_SECONDS", 5.0)
# Local passwords first (the break-glass superuser), then the providers that are configured.
AUTHENTICATION_BACKENDS = [
    "identity.backends.LocalPasswordBackend",
    *(["identity.oidc.OidcBackend"] if OIDC_ENABLED else []),
    *(["identity.saml.SamlBackend"] if SAML_ENABLED else []),
]

# LOG_FORMAT=json writes one JSON object per line, with the task, build, document and lease ids
# that the pipeline passes as `extra` (task_id, build_id, lease_owner, ...).
LOG_FORMAT = env_str("LOG_FORMAT", "plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "filters": {"routine": {"()": "config.logfilters.RoutineTasksFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": [] if env_bool("LOG_ROUTINE_TASKS", False) else ["routine"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # boto's INFO and DEBUG lines name where credentials came from and carry signed headers
        **{name: {"level": "WARNING"} for name in ("boto3", "botocore", "s3transfer", "urllib3")},
        # pysaml2's INFO lines carry whole assertions (a person's attributes); xmlschema's say
        # which schema it loaded
        **{name: {"level": "WARNING"} for name in ("saml2", "djangosaml2", "xmlschema")},
    },
}
