"""The load benchmark's processes: bench settings, its own database and broker."""

from datetime import timedelta

from bench.settings import *  # noqa: F403
from bench.settings import CELERY_BEAT_SCHEDULE, DATABASES, OUTBOX, env

DATABASES = {
    "default": {
        **DATABASES["default"],
        # Set by bench/load.py, which owns the defaults.
        **env.db_url("BENCH_LOAD_DATABASE_URL"),
        "CONN_MAX_AGE": None,
    }
}
# The relay, the consumer and webhook processing go through a real broker
# (Redis database 14 by default), consumed by a real celery worker.
CELERY_BROKER_URL = env("BENCH_LOAD_BROKER_URL")
CELERY_BROKER_TRANSPORT_OPTIONS = {}
# The bench's handler that counts each run of a webhook's handlers.
CELERY_IMPORTS = ["bench.load_handlers"]
# record() kicks the relay on commit; beat is the safety net, run more often
# than the demo's 30 s so a lost kick cannot stall the drain check.
CELERY_BEAT_SCHEDULE = {
    **CELERY_BEAT_SCHEDULE,
    "outbox-relay": {"task": "outbox.relay", "schedule": 5.0},
}
# Clients log in with HTTP Basic on every request: PBKDF2 (by design slow)
# would be most of each request's cost, so hash with MD5 here. Bench only.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# KICK_INTERVAL of the phase that kicks the relay on every commit (the
# validator refuses 0; a microsecond never coalesces two commits).
if "BENCH_LOAD_KICK_INTERVAL" in env.ENVIRON:
    OUTBOX = {
        **OUTBOX,
        "KICK_INTERVAL": timedelta(seconds=env.float("BENCH_LOAD_KICK_INTERVAL")),
    }
