"""The webhook benchmark's server: bench settings, its own database and URLs."""

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES, env

DATABASES = {
    "default": {
        **DATABASES["default"],
        **env.db_url(
            "BENCH_WEBHOOKS_DATABASE_URL",
            default="postgres://postgres@127.0.0.1:5432/once_bench_webhooks",
        ),
        "CONN_MAX_AGE": None,
    }
}
ROOT_URLCONF = "bench.webhooks_urls"
# The intake enqueues to a real broker (Redis database 12 on this machine).
CELERY_BROKER_URL = env(
    "BENCH_WEBHOOKS_BROKER_URL", default="redis://127.0.0.1:6379/12"
)
CELERY_BROKER_TRANSPORT_OPTIONS = {}
