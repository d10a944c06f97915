"""Processing: once per receipt, failures recorded, redelivery retries."""

import json
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote_plus

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import Client

from tests.testapp.models import Widget
from tests.webhooks import signing
from webhooks import processing
from webhooks.handlers import on
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls():
    """Register a handler for github "push" that records what it saw."""
    seen = []

    @on("github", "push")
    def record(event):
        seen.append(event)
        Widget.objects.create(name=f"from {event.delivery_id}")

    return seen


def deliver(delivery_id="evt_1", event="push"):
    body = signing.event_body(delivery_id)
    headers = signing.github_headers(body, delivery_id=delivery_id, event=event)
    return Client().post(
        "/webhooks/github/", body, content_type="application/json", headers=headers
    )


def receipt():
    return WebhookReceipt.objects.get()


def test_a_receipt_is_processed_by_its_handler(calls):
    deliver()
    state = processing.process(receipt().pk)

    assert state == "processed"
    assert [e.delivery_id for e in calls] == ["evt_1"]
    assert calls[0].event_type == "push"
    assert calls[0].data["id"] == "evt_1"
    done = receipt()
    assert (done.state, done.attempts, done.last_error) == ("processed", 1, "")
    assert done.processed_at is not None


@pytest.mark.parametrize("stored", [["Content-Type", "User-Agent"], ["User-Agent"]])
def test_a_form_encoded_github_delivery_reaches_its_handler_as_json(
    calls, webhook_sources, stored
):
    webhook_sources.WEBHOOKS["SOURCES"]["github"]["HEADERS"] = stored
    event = json.loads(signing.event_body())
    body = b"payload=" + quote_plus(json.dumps(event)).encode()
    response = Client().post(
        "/webhooks/github/",
        body,
        content_type="application/x-www-form-urlencoded",
        headers=signing.github_headers(body),
    )
    assert response.status_code == 202
    # The body as signed; the Content-Type it came with says how to read it,
    # and is kept even when HEADERS leaves it out.
    assert bytes(receipt().body) == body
    assert receipt().headers["Content-Type"] == "application/x-www-form-urlencoded"

    assert processing.process(receipt().pk) == "processed"
    assert calls[0].data == event


def test_processing_twice_runs_the_handler_once(calls):
    deliver()
    processing.process(receipt().pk)
    assert processing.process(receipt().pk) == "processed"
    assert len(calls) == 1
    assert Widget.objects.count() == 1


def test_an_event_without_handlers_is_skipped(calls):
    deliver(event="ping")
    assert processing.process(receipt().pk) == "skipped"
    assert calls == []
    assert receipt().state == "skipped"


def test_a_missing_receipt_is_reported():
    assert processing.process(12345) == processing.Outcome.MISSING


@pytest.mark.parametrize(
    ("message", "recorded"),
    [
        ("downstream said no", "downstream said no"),
        # What a text column refuses is recorded escaped.
        ("downstream said \x00no \udc80", "downstream said \\x00no \\udc80"),
    ],
)
def test_a_failing_handler_rolls_back_and_records_the_failure(calls, message, recorded):
    @on("github", "push")
    def explode(event):
        raise RuntimeError(message)

    deliver()
    with pytest.raises(processing.HandlerFailed):
        processing.process(receipt().pk)

    failed = receipt()
    assert failed.state == "failed"
    assert failed.attempts == 1
    assert recorded in failed.last_error
    # The first handler's write rolled back with the failure.
    assert Widget.objects.count() == 0


def test_a_plain_handler_that_abandons_rolls_back_and_is_not_run_again(calls):
    """Abandon gives the delivery up, as in a steps handler: with no steps to
    undo, its handlers' writes roll back and the receipt is processed with
    the reason, not failed and retried (it ran every retry, and ended failed)."""
    from idempotency.shared.steps import Abandon

    @on("github", "push")
    def give_up(event):
        raise Abandon("the order was cancelled \x00")

    deliver()
    assert processing.process(receipt().pk) == "processed"
    assert processing.process(receipt().pk, failures=1) == "processed"

    done = receipt()
    assert (done.state, done.attempts) == ("processed", 1)
    assert done.last_error == "abandoned: the order was cancelled \\x00"
    assert len(calls) == 1  # the first handler ran once
    assert Widget.objects.count() == 0  # and its write rolled back


def test_a_failed_receipt_is_processed_once_after_a_redelivery(
    calls, django_capture_on_commit_callbacks
):
    failures = [RuntimeError("once")]

    @on("github", "push")
    def flaky(event):
        if failures:
            raise failures.pop()

    deliver()
    with pytest.raises(processing.HandlerFailed):
        processing.process(receipt().pk)
    assert receipt().state == "failed"

    # GitHub's "Redeliver" resends the same delivery id.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = deliver()
    assert response.status_code == 202
    assert len(callbacks) == 1
    # Later redeliveries and replays find it processed.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert deliver().status_code == 200
    assert callbacks == []
    assert processing.process(receipt().pk) == "processed"

    done = receipt()
    assert (done.state, done.attempts) == ("processed", 2)
    assert Widget.objects.count() == 1


def test_a_replayed_delivery_is_processed_once(
    calls, django_capture_on_commit_callbacks
):
    for _ in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            deliver()
    assert len(calls) == 1
    assert receipt().state == "processed"


def test_the_error_kept_is_bounded(calls):
    @on("github", "push")
    def verbose(event):
        raise RuntimeError("x" * 10_000)

    deliver()
    with pytest.raises(processing.HandlerFailed):
        processing.process(receipt().pk)
    assert len(receipt().last_error) <= processing.MAX_ERROR_LENGTH


def test_receipts_left_received_are_enqueued_again(clock):
    deliver("old")
    clock.advance(minutes=10)
    deliver("new")
    enqueued = []

    count = processing.enqueue_waiting(timedelta(minutes=5), enqueued.append)

    assert count == 1
    assert enqueued == [WebhookReceipt.objects.get(delivery_id="old").pk]


def test_a_receipt_under_a_live_lease_is_not_enqueued_again(clock):
    # A steps handler running longer than older_than holds its lease: beat
    # sent it again on every run, and the copies piled up behind the lease.
    deliver("running")
    deliver("lapsed")
    clock.advance(minutes=10)
    WebhookReceipt.objects.filter(delivery_id="running").update(
        locked_until=clock.now() + timedelta(minutes=1)
    )
    WebhookReceipt.objects.filter(delivery_id="lapsed").update(
        locked_until=clock.now() - timedelta(seconds=1)
    )
    enqueued = []

    count = processing.enqueue_waiting(timedelta(minutes=5), enqueued.append)

    assert enqueued == [WebhookReceipt.objects.get(delivery_id="lapsed").pk]
    assert count == 1


def test_a_drain_processes_the_received_receipts_oldest_first(calls, clock):
    for delivery_id in ["evt_1", "evt_2", "evt_3"]:
        deliver(delivery_id)
        clock.advance(seconds=1)

    assert processing.drain(100, retry=pytest.fail) == 3
    assert [e.delivery_id for e in calls] == ["evt_1", "evt_2", "evt_3"]
    assert set(WebhookReceipt.objects.values_list("state", flat=True)) == {"processed"}
    assert processing.drain(100, retry=pytest.fail) == 0


def test_a_drain_stops_at_its_limit(calls):
    for delivery_id in ["evt_1", "evt_2", "evt_3"]:
        deliver(delivery_id)

    assert processing.drain(2, retry=pytest.fail) == 2
    assert WebhookReceipt.objects.filter(state="received").count() == 1


def test_a_drain_hands_a_failing_receipt_to_retry_and_goes_on():
    @on("github", "push")
    def broken(event):
        if event.delivery_id == "evt_bad":
            raise ConnectionError("down")

    deliver("evt_bad")
    deliver("evt_good")
    retried = []

    assert processing.drain(100, retry=retried.append) == 2
    bad = WebhookReceipt.objects.get(delivery_id="evt_bad")
    assert retried == [bad.pk]
    assert (bad.state, bad.attempts) == ("failed", 1)
    assert WebhookReceipt.objects.get(delivery_id="evt_good").state == "processed"


def test_a_receipt_whose_kick_was_lost_is_processed_by_enqueue_waiting(
    calls, clock, monkeypatch, django_capture_on_commit_callbacks
):
    """The broker is down when the delivery commits: the drain kick fails, the
    provider still gets 202, and beat's enqueue_waiting kicks again later."""
    from webhooks import kicks, tasks

    def broker_down(*args, **kwargs):
        raise ConnectionError("broker down")

    with monkeypatch.context() as broken:
        broken.setattr(tasks.drain, "apply_async", broker_down)
        with django_capture_on_commit_callbacks(execute=True):
            assert deliver().status_code == 202
    assert receipt().state == "received"

    kicks.drain_kicker.reset()  # the window a real beat run, minutes later, sees
    clock.advance(minutes=6)
    assert tasks.enqueue_waiting.apply().get() == 1  # Celery is eager here

    assert receipt().state == "processed"
    assert [e.delivery_id for e in calls] == ["evt_1"]


def test_an_async_handler_is_refused_when_it_is_registered():
    # Called in the receipt's transaction, it would return a coroutine that
    # never runs, and the receipt would say processed.
    async def notify(event):
        Widget.objects.create(name="never")

    with pytest.raises(ImproperlyConfigured, match="async"):
        on("github", "push")(notify)
    deliver()
    assert processing.process(receipt().pk) == "skipped"


def test_a_handler_returning_an_awaitable_fails_the_receipt():
    async def notify(event):
        Widget.objects.create(name="never")

    @on("github", "push")
    def wrapped(event):
        return notify(event)

    deliver()
    with pytest.raises(processing.HandlerFailed, match="awaitable"):
        processing.process(receipt().pk)
    assert receipt().state == "failed"
    assert "awaitable" in receipt().last_error


def test_a_generator_handler_is_refused_when_it_is_registered():
    # A yield by mistake: called, it would return a generator whose body
    # never runs, and the receipt would say processed.
    def notify(event):
        yield Widget.objects.create(name="never")

    with pytest.raises(ImproperlyConfigured, match="generator"):
        on("github", "push")(notify)


def test_a_handler_returning_a_generator_fails_the_receipt():
    @on("github", "push")
    def lazy(event):
        return (Widget.objects.create(name=n) for n in ["never"])

    deliver()
    with pytest.raises(processing.HandlerFailed, match="generator"):
        processing.process(receipt().pk)
    assert receipt().state == "failed"
    assert Widget.objects.count() == 0


def test_one_receipt_whose_enqueue_fails_leaves_the_others_enqueued(clock, caplog):
    # A custom ENQUEUE routing per source may fail for one source only: the
    # safety net stopped at its oldest receipt, on every beat run, and the
    # other sources' lost receipts were never enqueued again.
    deliver("broken")
    deliver("fine")
    clock.advance(minutes=10)
    broken = WebhookReceipt.objects.get(delivery_id="broken").pk
    enqueued = []

    def enqueue(pk):
        if pk == broken:
            raise ConnectionError("no route to this source's queue")
        enqueued.append(pk)

    count = processing.enqueue_waiting(timedelta(minutes=5), enqueue)

    assert enqueued == [WebhookReceipt.objects.get(delivery_id="fine").pk]
    assert count == 1
    assert f"Could not enqueue receipt {broken}" in caplog.text


def test_a_source_whose_enqueue_fails_holds_back_no_other_source_past_the_limit(
    clock,
):
    # More receipts of the broken route than one run enqueues (its limit,
    # 1,000 for beat's) took every run's picks, oldest first, and the other
    # sources' lost receipts were never enqueued again.
    for delivery_id in ["broken-1", "broken-2", "broken-3"]:
        deliver(delivery_id)
    body = signing.event_body("evt_stripe")
    Client().post(
        "/webhooks/stripe/",
        body,
        content_type="application/json",
        headers=signing.stripe_headers(body),
    )
    clock.advance(minutes=10)
    enqueued = []

    def enqueue(pk):
        if WebhookReceipt.objects.get(pk=pk).source == "github":
            raise ConnectionError("no route to this source's queue")
        enqueued.append(pk)

    for _run in range(2):  # beat's runs, each finding the same receipts
        processing.enqueue_waiting(timedelta(minutes=5), enqueue, limit=2)

    stripe = WebhookReceipt.objects.get(source="stripe").pk
    assert enqueued == [stripe, stripe]


@dataclass
class Forward:
    """A handler that is an object: a dataclass, so it cannot be hashed."""

    name: str

    def __call__(self, event):
        Widget.objects.create(name=f"{self.name} {event.delivery_id}")


def test_a_handler_that_cannot_be_hashed_runs():
    # It registered, then every receipt of its event failed with TypeError
    # (unhashable) when processing asked whether it runs steps.
    on("github", "push")(Forward("forwarded"))
    deliver()
    assert processing.process(receipt().pk) == "processed"
    assert Widget.objects.get().name == "forwarded evt_1"


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_enqueue_waiting_reads_where_writes_go(clock, reads_from_a_replica):
    # Beat's safety net decides what to enqueue: a replica behind the primary
    # still shows a receipt received that a worker has processed since.
    waiting = WebhookReceipt.objects.create(
        source="github",
        delivery_id="evt_1",
        event_type="push",
        state="received",
        body=b"{}",
        headers={},
        received_at=clock.now(),
    )
    clock.advance(minutes=10)
    enqueued = []

    with transaction.atomic():
        # Processed on the primary; the replica has not caught up yet.
        WebhookReceipt.objects.using("default").filter(pk=waiting.pk).update(
            state="processed", processed_at=clock.now()
        )
        count = processing.enqueue_waiting(timedelta(minutes=5), enqueued.append)

    assert enqueued == []
    assert count == 0
