"""The Celery task path: retry with backoff, and the default enqueue."""

import pytest
from django.test import Client

from tests.webhooks import signing
from webhooks import tasks
from webhooks.handlers import on
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db


def deliver():
    body = signing.event_body()
    return Client().post(
        "/webhooks/github/",
        body,
        content_type="application/json",
        headers=signing.github_headers(body),
    )


def test_a_delivery_runs_through_celery_and_a_failure_is_retried(
    django_capture_on_commit_callbacks,
):
    runs = []

    @on("github", "push")
    def flaky(event):
        runs.append(event.delivery_id)
        if len(runs) == 1:
            raise ConnectionError("first try fails")

    # The default ENQUEUE calls process_receipt.delay(); Celery is eager here.
    with django_capture_on_commit_callbacks(execute=True):
        assert deliver().status_code == 202

    receipt = WebhookReceipt.objects.get()
    assert runs == ["evt_1", "evt_1"]
    assert (receipt.state, receipt.attempts) == ("processed", 2)


def test_retries_stop_at_max_retries(webhook_sources):
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, "MAX_RETRIES": 2}
    runs = []

    @on("github", "push")
    def broken(event):
        runs.append(1)
        raise ConnectionError("down")

    deliver()
    result = tasks.process_receipt.apply(args=[WebhookReceipt.objects.get().pk])

    assert result.failed()
    assert len(runs) == 3
    receipt = WebhookReceipt.objects.get()
    assert (receipt.state, receipt.attempts) == ("failed", 3)


@pytest.mark.parametrize("retries", range(12))
def test_backoff_grows_is_capped_and_jittered(retries):
    delay = tasks.backoff(retries)
    ceiling = min(600, 2 ** (retries + 1))
    assert ceiling / 2 <= delay <= ceiling


def test_the_task_names_are_explicit():
    assert tasks.process_receipt.name == "webhooks.process_receipt"
    assert tasks.enqueue_waiting.name == "webhooks.enqueue_waiting"


@pytest.mark.parametrize("retried", ["by the task", "after a drain"])
def test_a_receipts_retry_is_persistent_whatever_the_apps_default(monkeypatch, retried):
    # The failed run is acked once its retry is sent: transient
    # (task_default_delivery_mode), a broker restart dropped the retry and
    # the receipt stayed failed, its retries never run.
    from celery.exceptions import Retry
    from kombu.messaging import Producer

    from tests.celery import app

    sent = []
    monkeypatch.setattr(
        Producer, "publish", lambda self, body, **options: sent.append(options)
    )
    saved = app.conf.task_default_delivery_mode
    app.conf.task_default_delivery_mode = "transient"
    app.conf.task_always_eager = False  # sent to the broker (eager_celery resets it)
    try:
        if retried == "after a drain":
            tasks.retry_later(1)
        else:
            tasks.process_receipt.push_request(
                id="r-1",
                args=(1,),
                delivery_info={"exchange": "", "routing_key": "celery"},
                called_directly=False,
                is_eager=False,
            )
            try:
                with pytest.raises(Retry):
                    tasks.process_receipt.retry(exc=RuntimeError("x"), countdown=60)
            finally:
                tasks.process_receipt.pop_request()
    finally:
        app.conf.task_default_delivery_mode = saved

    [options] = sent
    assert options["delivery_mode"] == 2
