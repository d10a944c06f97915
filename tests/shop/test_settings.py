"""The demo's settings pass the apps' checks."""

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
