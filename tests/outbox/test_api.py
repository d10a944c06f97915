"""record(): the event commits with the change it describes, or not at all."""

import enum
import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings

from idempotency.shared.storable import MAX_DEPTH
from outbox.api import CLOCK_SKEW_ALLOWANCE, MESSAGE_ID_HEADER, record
from outbox.exceptions import EventInvalid, NotInTransaction, OutboxConfigurationError
from outbox.models import OutboxMessage
from tests.testapp.models import Widget

from .conftest import IN_MEMORY

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


def test_record_writes_a_pending_row_and_returns_its_id():
    with transaction.atomic():
        message_id = record("order", 7, "order.created", {"sku": "A"}, headers={"k": 1})

    assert isinstance(message_id, uuid.UUID)
    message = OutboxMessage.objects.get()
    assert message.pk == message_id
    assert (message.aggregatetype, message.aggregateid, message.type) == (
        "order",
        "7",
        "order.created",
    )
    assert message.payload == {"sku": "A"}
    assert message.headers == {"k": 1, MESSAGE_ID_HEADER: str(message_id)}
    assert message.state == "pending"
    assert message.attempts == 0
    assert message.available_at == message.created_at - CLOCK_SKEW_ALLOWANCE


def test_business_row_and_event_commit_together():
    with transaction.atomic():
        Widget.objects.create(name="w")
        record("widget", 1, "widget.created", {})

    assert Widget.objects.count() == 1
    assert OutboxMessage.objects.count() == 1


def test_a_failure_after_record_rolls_back_both():
    with pytest.raises(Boom), transaction.atomic():
        Widget.objects.create(name="w")
        record("widget", 1, "widget.created", {})
        raise Boom

    assert Widget.objects.count() == 0
    assert OutboxMessage.objects.count() == 0


def test_a_failing_record_rolls_back_the_business_row():
    with pytest.raises(TypeError), transaction.atomic():
        Widget.objects.create(name="w")
        record("widget", 1, "widget.created", {"not json": object()})

    assert Widget.objects.count() == 0
    assert OutboxMessage.objects.count() == 0


def test_a_decimal_a_datetime_and_a_uuid_are_stored_as_their_text():
    # As docs/outbox.md says: the consumer gets "10.00", not a float.
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    ident = uuid.UUID(int=1)
    with transaction.atomic():
        payload = {"amount": Decimal("10.00"), "at": moment, "id": ident}
        record("payment", 1, "payment.captured", payload)

    assert OutboxMessage.objects.get().payload == {
        "amount": "10.00",
        "at": "2026-01-02T03:04:05Z",
        "id": str(ident),
    }


@pytest.mark.parametrize(
    ("args", "headers", "error"),
    [
        (("o" * 256, 1, "order.created", {}), None, "aggregate type has 256"),
        (("order", "1" * 256, "order.created", {}), None, "aggregate id has 256"),
        (("order", 1, "t" * 256, {}), None, "event type has 256"),
        (("order\x00", 1, "order.created", {}), None, "NUL"),
        (("order", 1, "order.created", {"note": "a\x00b"}), None, "NUL"),
        (("order", 1, "order.created", ["a\ud800b"]), None, "lone surrogate"),
        (("order", 1, "order.created", {"n": float("nan")}), None, "not JSON"),
        (("order", 1, "order.created", {}), {"k\x00": 1}, "header holds a NUL"),
        (("order", 1, "order.created", {}), {"k": "\udfff"}, "lone surrogate"),
    ],
    ids=[
        "long-type",
        "long-id",
        "long-event-type",
        "nul-type",
        "nul-payload",
        "surrogate-payload",
        "nan-payload",
        "nul-header-key",
        "surrogate-header",
    ],
)
def test_record_refuses_a_value_the_table_cannot_store_before_any_sql(
    args, headers, error
):
    with transaction.atomic():
        Widget.objects.create(name="w")
        with (
            CaptureQueriesContext(connection) as queries,
            pytest.raises(EventInvalid, match=error),
        ):
            record(*args, headers=headers)
        assert queries.captured_queries == []
        # The caller's transaction goes on.
        record("widget", 1, "widget.created", {"at": Widget.objects.get().pk})

    assert OutboxMessage.objects.count() == 1


def test_record_refuses_a_payload_of_none_before_any_sql():
    # The column is NOT NULL and the JSONField stores None as SQL NULL: the
    # INSERT's IntegrityError broke the caller's transaction.
    with transaction.atomic():
        Widget.objects.create(name="w")
        with (
            CaptureQueriesContext(connection) as queries,
            pytest.raises(EventInvalid, match="payload is None"),
        ):
            record("order", 1, "order.created", None)
        assert queries.captured_queries == []
        record("widget", 1, "widget.created", {})

    assert OutboxMessage.objects.count() == 1


def nested(depth):
    value: list = []
    for _level in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
@pytest.mark.parametrize("where", ["payload", "headers"])
def test_record_refuses_a_value_nested_too_deeply_before_any_sql(depth, where):
    # The encoder's RecursionError escaped record(); and a value just within
    # the interpreter's reach would fail the relay reading it, deeper down.
    deep = {"payload": nested(depth), "headers": None}
    if where == "headers":
        deep = {"payload": {}, "headers": {"trail": nested(depth)}}
    with transaction.atomic():
        with (
            CaptureQueriesContext(connection) as queries,
            pytest.raises(EventInvalid, match="nested too deeply"),
        ):
            record("order", 1, "order.created", **deep)
        assert queries.captured_queries == []
        record("widget", 1, "widget.created", {})  # the transaction goes on

    assert OutboxMessage.objects.get().aggregatetype == "widget"


def test_record_refuses_headers_nested_deeper_than_amqp_encodes_before_any_sql():
    # py-amqp encodes a header table with two frames a level: headers of
    # 400 levels (record() took 500) failed the relay on RabbitMQ, with every
    # message of their batch, until they were dead.
    with transaction.atomic():
        with (
            CaptureQueriesContext(connection) as queries,
            pytest.raises(EventInvalid, match="header is nested too deeply"),
        ):
            record("order", 1, "order.created", {}, headers={"t": nested(100)})
        assert queries.captured_queries == []


def test_record_keeps_headers_nested_as_deep_as_allowed():
    with transaction.atomic():
        record("order", 1, "order.created", {}, headers={"t": nested(99)})

    assert OutboxMessage.objects.get().headers["t"] == nested(99)


def test_record_keeps_a_payload_nested_as_deep_as_allowed():
    with transaction.atomic():
        record("order", 1, "order.created", nested(MAX_DEPTH))

    assert OutboxMessage.objects.get().payload == nested(MAX_DEPTH)


def test_record_takes_names_that_are_not_strings_as_their_text():
    # As the columns cast them, and as record() took them before it checked.
    class Event(enum.Enum):
        CREATED = "created"

    with transaction.atomic():
        record(5, 1, Event.CREATED, {})

    row = OutboxMessage.objects.get()
    assert (row.aggregatetype, row.aggregateid, row.type) == (
        "5",
        "1",
        str(Event.CREATED),
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("order", None, "order.created"), "aggregate id is None"),
        ((None, 1, "order.created"), "aggregate type is None"),
        (("order", 1, None), "event type is None"),
        (("order", b"7", "order.created"), "aggregate id is b'7'"),
        (("order", Widget(pk=7, name="w"), "order.created"), "aggregate id is <Widget"),
    ],
    ids=["unsaved-pk", "no-type", "no-event-type", "bytes", "instance"],
)
def test_record_refuses_a_name_whose_text_is_not_the_name(args, error):
    # str() stored "None", "b'7'" and "Widget object (7)" as the aggregate.
    with transaction.atomic():
        with pytest.raises(EventInvalid, match=re.escape(error)):
            record(*args, {})
        record("widget", 1, "widget.created", {})  # the transaction goes on

    assert OutboxMessage.objects.get().aggregatetype == "widget"


def test_record_refuses_to_run_outside_a_transaction():
    with pytest.raises(NotInTransaction, match=r"transaction\.atomic"):
        record("order", 1, "order.created", {})

    assert OutboxMessage.objects.count() == 0


def test_record_can_be_told_to_run_on_its_own():
    record("order", 1, "order.created", {}, require_transaction=False)

    assert OutboxMessage.objects.count() == 1


@pytest.mark.postgresql
@override_settings(OUTBOX={"RELAY": "debezium"})
def test_debezium_mode_inserts_and_deletes_in_one_transaction_never_updates():
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        Widget.objects.create(name="w")
        record("widget", 1, "widget.created", {"a": 1})

    statements = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    outbox_sql = [q["sql"] for q in queries.captured_queries if "outbox" in q["sql"]]
    assert [s.split()[0] for s in outbox_sql] == ["INSERT", "DELETE"]
    assert "UPDATE" not in statements
    assert OutboxMessage.objects.count() == 0
    assert Widget.objects.count() == 1


@override_settings(OUTBOX={"RELAY": "debezium"})
def test_debezium_mode_without_postgresql_is_refused_before_anything_is_written():
    # Debezium reads PostgreSQL's WAL: on SQLite the row record() inserts and
    # deletes would reach no one, and every event would be lost unnoticed.
    if connection.vendor == "postgresql":
        pytest.skip("the refusal is for a database Debezium cannot read")
    with (
        pytest.raises(OutboxConfigurationError, match="Debezium reads PostgreSQL"),
        transaction.atomic(),
    ):
        Widget.objects.create(name="w")
        record("widget", 1, "widget.created", {"a": 1})

    assert Widget.objects.count() == 0
    assert OutboxMessage.objects.count() == 0


def test_the_commit_kicks_the_relay_once(monkeypatch, sent, eager_celery):
    from outbox import tasks

    kicks = []
    real = tasks.relay.apply_async
    monkeypatch.setattr(
        tasks.relay, "apply_async", lambda *a, **kw: kicks.append(1) or real(*a, **kw)
    )
    with (
        override_settings(
            OUTBOX={
                **IN_MEMORY,
                "KICK_ON_COMMIT": True,
            }
        ),
        transaction.atomic(),
    ):
        record("order", 1, "order.created", {})
        record("order", 2, "order.created", {})
        assert sent == []  # nothing leaves before the commit

    assert len(kicks) == 1
    assert len(sent) == 2
    assert OutboxMessage.objects.published().count() == 2


def test_a_rolled_back_transaction_kicks_nothing(monkeypatch):
    from outbox import tasks

    kicks = []
    monkeypatch.setattr(tasks.relay, "apply_async", lambda *a, **kw: kicks.append(1))
    with override_settings(OUTBOX={"KICK_ON_COMMIT": True}):
        with pytest.raises(Boom), transaction.atomic():
            record("order", 1, "order.created", {})
            raise Boom
        with transaction.atomic():
            record("order", 2, "order.created", {})

    assert kicks == [1]
