"""Benchmark settings: the demo project on a PostgreSQL database of its own."""

from project.settings import *  # noqa: F403
from project.settings import env

DATABASES = {
    "default": env.db_url(
        "BENCH_DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/once_bench"
    )
}
DATABASES["default"]["CONN_MAX_AGE"] = None
ROOT_URLCONF = "bench.urls"
DEBUG = False
ALLOWED_HOSTS = ["*"]
