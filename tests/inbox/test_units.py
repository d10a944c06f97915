"""An inbox delivery is a unit of work: ``delivery.unit``, its
``derive(step)``, and the intent its message carried, passed on by record()."""

import json
import logging

import pytest
from django.db import transaction

from idempotency.shared import units
from inbox.api import consumer, intent_from, receive
from outbox.api import record
from outbox.models import OutboxMessage

pytestmark = pytest.mark.django_db(transaction=True)

INTENT = units.Unit(units.KEYS, ("user:1", "order.create", "k")).intent


def test_the_delivery_delegates_to_its_unit():
    with receive("stock", "m1", intent=INTENT) as delivery:
        assert delivery.unit == units.Unit(units.INBOX, ("stock", "m1"))
        assert delivery.derive("ship") == delivery.unit.derive("ship")
        assert delivery.intent == INTENT


def test_the_block_runs_with_the_delivery_current():
    assert units.current() is None
    with receive("stock", "m1") as delivery:
        assert units.current() == delivery.unit
    assert units.current() is None


def test_a_redelivery_derives_the_same_keys_and_serves_the_same_intent():
    class Boom(Exception):
        pass

    seen = []
    for attempt in range(3):  # raises, applies, then a duplicate
        try:
            with receive("stock", "m1", intent=INTENT) as delivery:
                seen.append((delivery.duplicate, delivery.derive("ship")))
                seen.append((delivery.duplicate, delivery.intent))
                if attempt == 0:
                    raise Boom
        except Boom:
            pass
    assert [duplicate for duplicate, _ in seen] == [False] * 4 + [True] * 2
    assert len({value for _, value in seen[0::2]}) == 1
    assert {value for _, value in seen[1::2]} == {INTENT}


def test_derived_keys_differ_across_subscribers_messages_and_kinds():
    def derived(subscriber, message_id):
        with receive(subscriber, message_id) as delivery:
            return delivery.derive("ship")

    keys = {
        derived("stock", "m1"),
        derived("mailer", "m1"),
        derived("stock", "m2"),
        # A webhook receipt and a keyed request with the same parts.
        units.Unit(units.WEBHOOKS, ("stock", "m1")).derive("ship"),
        units.Unit(units.KEYS, ("stock", "m1", "")).derive("ship"),
    }
    assert len(keys) == 5


def test_a_step_name_holding_the_separator_cannot_derive_another_messages_key():
    # Message ids may hold \x1f: message "m1\x1fa"'s step "b" and message
    # "m1"'s step "a\x1fb" would hash the same parts.
    other = units.Unit(units.INBOX, ("stock", "m1\x1fa")).derive("b")
    with receive("stock", "m1") as delivery, pytest.raises(ValueError, match="sep"):
        assert delivery.derive("a\x1fb") != other


def test_a_message_without_an_intent_starts_its_own():
    with receive("stock", "m1") as delivery:
        assert delivery.intent == delivery.unit.derive(units.INTENT_STEP)
        assert delivery.intent != INTENT


@pytest.mark.parametrize(
    "carried", ["not-a-digest", INTENT.upper(), INTENT + "0", 42, {"a": 1}]
)
def test_a_malformed_intent_is_dropped_and_the_delivery_starts_its_own(carried, caplog):
    with (
        caplog.at_level(logging.WARNING, "inbox"),
        receive("stock", "m1", intent=carried) as delivery,
    ):
        assert delivery.intent == delivery.unit.derive(units.INTENT_STEP)
    assert "malformed once-intent" in caplog.text


def test_an_intent_given_as_bytes_is_the_same_intent_as_its_text(caplog):
    # A Kafka header's value is bytes: the message id beside it is decoded,
    # and so is the intent, or the chain would break at that hop.
    headers = {"once-message-id": b"m1", "once-intent": INTENT.encode()}
    with (
        caplog.at_level(logging.WARNING, "inbox"),
        receive("stock", b"m1", intent=intent_from(headers)) as delivery,
    ):
        assert delivery.intent == INTENT
    assert "malformed" not in caplog.text


def test_record_in_the_block_carries_the_intent_the_message_carried():
    # receive() opens the transaction record() joins.
    with receive("stock", "m1", intent=INTENT):
        record("shipment", 1, "shipment.booked", {})
    assert OutboxMessage.objects.get().headers["once-intent"] == INTENT


def test_an_intent_given_to_record_is_kept():
    other = units.Unit(units.WEBHOOKS, ("github", "d")).intent
    # receive() opens the transaction record() joins.
    with receive("stock", "m1", intent=INTENT):
        record("shipment", 1, "shipment.booked", {}, headers={"once-intent": other})
    assert OutboxMessage.objects.get().headers["once-intent"] == other


def test_record_outside_any_unit_adds_no_intent():
    with transaction.atomic():
        record("shipment", 1, "shipment.booked", {})
    assert "once-intent" not in OutboxMessage.objects.get().headers


def test_the_intent_is_found_beside_or_inside_the_events_own_headers():
    # Our publishers send it beside the message id; Debezium's router only
    # inside once-headers, as JSON text.
    assert intent_from({"once-intent": INTENT}) == INTENT
    assert intent_from({"once-headers": {"once-intent": INTENT}}) == INTENT
    assert intent_from({"once-headers": json.dumps({"once-intent": INTENT})}) == INTENT
    assert intent_from({"once-headers": b'{"once-intent": "%s"}' % INTENT.encode()})
    assert intent_from({"once-headers": "{not json"}) is None
    assert intent_from({"once-headers": "[" * 100_000}) is None
    assert intent_from({"once-headers": ["a list"]}) is None
    assert intent_from({}) is None
    assert intent_from(None) is None


def test_a_consumer_runs_as_its_delivery_and_finds_the_intent_in_its_headers():
    seen = []

    @consumer("stock")
    def handle(*, payload, headers):
        seen.append(units.current())

    handle(payload={}, headers={"once-message-id": "m1", "once-intent": INTENT})
    handle(
        payload={},
        headers={"id": "m2", "once-headers": json.dumps({"once-intent": INTENT})},
    )

    assert [unit.parts for unit in seen] == [("stock", "m1"), ("stock", "m2")]
    assert {unit.intent for unit in seen} == {INTENT}


def test_a_consumer_can_say_where_its_intent_is():
    seen = []

    @consumer("stock", message_id="event_id", intent=lambda **kw: kw["trace"])
    def handle(*, event_id, trace):
        seen.append(units.current().intent)

    handle(event_id="m1", trace=INTENT)
    assert seen == [INTENT]
