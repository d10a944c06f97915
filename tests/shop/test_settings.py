"""The demo's settings pass the apps' checks."""

import os
import subprocess
import sys

from project import settings as demo_settings
from tests.celery import app as celery_app
from webhooks.checks import check_settings, check_unhandled_sources


def test_the_demo_webhook_sources_pass(settings):
    settings.WEBHOOKS = demo_settings.WEBHOOKS
    assert check_settings() == []
    assert sorted(settings.WEBHOOKS["SOURCES"]) == ["github", "standard", "stripe"]


def test_every_demo_source_has_a_handler(settings):
    # Without one, the demo's own check and runserver warn webhooks.W005.
    settings.WEBHOOKS = demo_settings.WEBHOOKS
    assert check_unhandled_sources() == []


def test_the_demo_beat_runs_the_relay_waiting_receipts_and_the_purge_by_name():
    # The safety nets (a lost relay kick, a lost receipt enqueue) and the
    # retention purge run only if beat names each task as it is registered: a
    # misspelt name is sent, and no worker ever runs it.
    celery_app.loader.import_default_modules()
    beat = {entry["task"] for entry in demo_settings.CELERY_BEAT_SCHEDULE.values()}
    assert beat == {"outbox.relay", "webhooks.enqueue_waiting", "idempotency.purge"}
    assert beat <= set(celery_app.tasks)


def test_the_demo_needs_no_server_by_default():
    # DESIGN: "SQLite is the zero-setup default for the demo … the demo falls
    # back to a broker that needs no server". Read in a fresh process, with
    # neither DATABASE_URL nor CELERY_BROKER_URL set.
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
    }
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "from project import settings as s; "
            "print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()

    assert shown == ["django.db.backends.sqlite3", "filesystem://"]
