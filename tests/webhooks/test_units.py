"""A webhook receipt is a unit of work: ``event.unit``, its ``derive(step)``,
and the intent its handlers' events carry."""

from contextlib import suppress

import pytest
from django.db import transaction

from idempotency.shared import units
from idempotency.shared.steps import Abandon
from idempotency.shared.steps.models import UnitRecord
from inbox.api import intent_from, message_id_from, receive_steps
from outbox import relay
from outbox.api import record
from outbox.models import OutboxMessage
from outbox.publishers import InMemoryPublisher
from tests.signals import listening
from tests.webhooks.test_processing import deliver, receipt
from webhooks import processing
from webhooks.handlers import Event, on

pytestmark = pytest.mark.django_db


def event(source="github", delivery_id="evt_1"):
    return Event(None, source, "push", delivery_id, occurred_at=None)


def test_the_event_delegates_to_its_unit():
    e = event()
    assert e.unit == units.Unit(units.WEBHOOKS, ("github", "evt_1"))
    assert e.derive("ship") == e.unit.derive("ship")
    # A provider's delivery starts an intent of its own.
    assert e.intent == e.unit.derive(units.INTENT_STEP)


def test_derived_keys_differ_across_sources_deliveries_and_kinds():
    keys = {
        event().derive("ship"),
        event(source="stripe").derive("ship"),
        event(delivery_id="evt_2").derive("ship"),
        units.Unit(units.INBOX, ("github", "evt_1")).derive("ship"),
    }
    assert len(keys) == 4


def test_a_reprocessed_delivery_derives_the_same_keys_and_records_its_intent():
    seen = []

    @on("github", "push")
    def ship(event):
        seen.append((units.current(), event.derive("ship")))
        with transaction.atomic():
            record("shipment", 1, "shipment.booked", {})
        if len(seen) == 1:
            raise RuntimeError("the carrier timed out")

    deliver()
    with pytest.raises(processing.HandlerFailed):
        processing.process(receipt().pk)
    assert processing.process(receipt().pk) == "processed"

    (first, first_key), (retry, retry_key) = seen
    assert first == retry == units.Unit(units.WEBHOOKS, ("github", "evt_1"))
    assert first_key == retry_key
    # The first run's event rolled back with it; the retry's carries the
    # receipt's own intent.
    assert OutboxMessage.objects.get().headers["once-intent"] == first.intent
    assert units.current() is None


@pytest.mark.django_db(transaction=True)  # steps commit on their own
def test_a_steps_handlers_event_carries_its_intent_into_a_steps_consumers_unit():
    # Hop 1, a provider's delivery: an atomic step records the next event.
    @on("github", "push", steps=True)
    def book(event):
        event.step(
            "record",
            lambda key: str(record("shipment", 1, "shipment.booked", {})),
            atomic=True,
        )

    InMemoryPublisher.reset()
    with listening() as heard:
        deliver()
        processing.process(receipt().pk)
        relay.drain()
        # Hop 2, the broker's message: a steps consumer reads what it carries.
        [sent] = InMemoryPublisher.sent
        with receive_steps(
            "shipping", message_id_from(sent.headers), intent=intent_from(sent.headers)
        ) as delivery:
            delivery.step("carrier", lambda key: key)

    started = units.Unit(units.WEBHOOKS, ("github", "evt_1"))
    assert sent.headers["once-intent"] == started.intent
    assert delivery.intent == started.intent != delivery.unit.identity
    assert set(UnitRecord.objects.values_list("kind", "intent")) == {
        ("webhooks", started.intent),
        ("inbox", started.intent),
    }
    # Each step's signal names the intent of the delivery that started it.
    assert [
        (done["kind"], done["step"], done["intent"]) for done in heard.of("step_done")
    ] == [
        ("webhooks", "record", started.intent),
        ("inbox", "carrier", started.intent),
    ]


def refund_and_record(key, result):
    with transaction.atomic():
        record("payment", 1, "payment.refunded", {})


@pytest.mark.django_db(transaction=True)  # steps commit on their own
@pytest.mark.parametrize("gives_up", ["abandon", "last-attempt-fails"])
def test_an_undo_records_its_events_under_the_deliverys_intent(gives_up):
    @on("github", "push", steps=True)
    def charge(event):
        event.step("charge", lambda key: "ch_1", undo=refund_and_record)
        if gives_up == "abandon":
            raise Abandon("the order was cancelled")
        raise RuntimeError("the carrier is down")

    deliver()
    with suppress(processing.HandlerFailed):
        processing.process(receipt().pk, last_attempt=True)

    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED
    started = units.Unit(units.WEBHOOKS, ("github", "evt_1"))
    assert OutboxMessage.objects.get().headers["once-intent"] == started.intent
