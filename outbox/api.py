"""Record an event in the caller's transaction: ``record(...)``."""

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, models, router, transaction
from django.db.models import Max

from idempotency.shared import clock, databases, storable, tracing, units
from idempotency.shared.headers import INTENT_HEADER, MESSAGE_ID_HEADER

from . import signals
from .conf import DEBEZIUM, outbox_settings
from .exceptions import EventInvalid, NotInTransaction, OutboxConfigurationError
from .kicks import relay_kicker
from .models import OutboxMessage
from .querysets import CLOCK_SKEW_ALLOWANCE

# The deepest headers record() keeps. py-amqp encodes a header table with
# two frames a level, from the relay's own stack: 500 levels (what a payload
# may have) ran out of stack and failed the relay's batch on RabbitMQ.
MAX_HEADER_DEPTH = 100


def record(
    aggregate_type: str,
    aggregate_id: Any,
    event_type: str,
    payload: Any,
    *,
    headers: dict | None = None,
    using: str | None = None,
    require_transaction: bool = True,
) -> uuid.UUID:
    """Write one event in the current transaction and return its message id.

    Call it inside the ``transaction.atomic()`` block that makes the change the
    event describes: both commit or neither does. Outside one it raises
    ``NotInTransaction`` unless ``require_transaction=False``, which writes the
    event in a transaction of its own.

    Inside a unit of work (a keyed view, a consumer, a webhook handler) the
    event carries the unit's intent in its ``once-intent`` header; an intent
    given in ``headers`` is kept.

    A value the table cannot store (a name over 255 characters, a NUL or a
    lone surrogate, a payload or headers jsonb refuses, headers nested
    deeper than ``MAX_HEADER_DEPTH``, a payload of None)
    raises ``EventInvalid`` before any SQL: the caller's transaction can go on.
    """
    using = using or router.db_for_write(OutboxMessage)
    connection = connections[using]
    databases.refuse_unusable(using, OutboxConfigurationError)
    if why := debezium_unsupported(using):
        # Debezium mode deletes the row it inserts: with no WAL to read it
        # from, every event would be gone without a word.
        raise OutboxConfigurationError(why)
    if require_transaction and not connection.in_atomic_block:
        raise NotInTransaction(
            "outbox.api.record() must run inside transaction.atomic(), so the "
            "event commits with the change it describes; pass "
            "require_transaction=False to record it on its own."
        )
    _check_names(aggregate_type, aggregate_id, event_type)
    # As the columns would cast them: an Enum's or an int's text.
    aggregate_type, aggregate_id, event_type = map(
        str, (aggregate_type, aggregate_id, event_type)
    )
    _check_storable(aggregate_type, aggregate_id, event_type, payload, headers)
    message_id = uuid.uuid4()
    # Headers the caller gave win over the create span's context and the
    # current unit's intent. A caller's traceparent wins with its own
    # tracestate or none: the create span's describes another trace. And
    # the create span's traceparent goes with its own tracestate or none: a
    # caller's tracestate given alone describes another trace too.
    created = tracing.created(aggregate_type, message_id)
    given = headers or {}
    if tracing.TRACEPARENT in given:
        created = {}
    elif created and tracing.TRACESTATE in given:
        given = {
            name: value for name, value in given.items() if name != tracing.TRACESTATE
        }
    headers = {
        **created,
        **_intent_header(units.current_intent()),
        **given,
        MESSAGE_ID_HEADER: str(message_id),
    }
    # savepoint=False: joining the caller's transaction costs nothing, and a
    # failure here must fail the caller's change too.
    with transaction.atomic(using=using, savepoint=False):
        # Read the clock after the lock: in ordered mode created_at must follow
        # the commit of the previous writer of this aggregate.
        if outbox_settings.ORDERED:
            _lock_aggregate(connection, aggregate_type, aggregate_id)
            now = _after_the_aggregates_last(using, aggregate_type, aggregate_id)
        else:
            now = clock.now()
        message = OutboxMessage.objects.using(using).create(
            id=message_id,
            aggregatetype=aggregate_type,
            aggregateid=aggregate_id,
            type=event_type,
            payload=payload,
            headers=headers,
            tracingspancontext=_debezium_span_context(headers),
            created_at=now,
            available_at=now - CLOCK_SKEW_ALLOWANCE,
        )
        if outbox_settings.RELAY == DEBEZIUM:
            # CDC reads the INSERT from the WAL; the table stays empty and the
            # row is never updated. Same transaction, so nothing is lost.
            OutboxMessage.objects.using(using).filter(pk=message_id).delete()
        else:
            relay_kicker.on_commit(using)
        signals.recorded(message, using=using)
    return message_id


def _check_names(aggregate_type, aggregate_id, event_type):
    """Refuse a name whose text is not the name: ``str()`` makes "None" of an
    unsaved instance's pk, "b'7'" of bytes and "Order object (7)" of a model
    instance, and consumers would get that as the aggregate."""
    names = [
        ("The aggregate type", aggregate_type),
        ("The aggregate id", aggregate_id),
        ("The event type", event_type),
    ]
    for what, value in names:
        if value is None or isinstance(value, bytes | bytearray | models.Model):
            raise EventInvalid(
                f"{what} is {value!r:.80}: give its text (a model instance's "
                "pk, a saved one's)."
            )


def _check_storable(aggregate_type, aggregate_id, event_type, payload, headers):
    """Refuse what the INSERT would refuse, before it: a DataError there would
    break the caller's transaction in the middle of its work."""
    meta = OutboxMessage._meta
    columns = [
        ("The aggregate type", aggregate_type, meta.get_field("aggregatetype")),
        ("The aggregate id", aggregate_id, meta.get_field("aggregateid")),
        ("The event type", event_type, meta.get_field("type")),
    ]
    if payload is None:
        # The JSONField stores None as SQL NULL, which the column refuses.
        raise EventInvalid(
            "The payload is None: give a JSON value ({} for an event with no data)."
        )
    try:
        for what, value, column in columns:
            storable.check_column(value, column, what)
        # The columns' encoder: a datetime or a Decimal is stored as text.
        storable.jsonb(payload, "The payload", encoder=DjangoJSONEncoder)
        storable.jsonb(headers or {}, "A header", encoder=DjangoJSONEncoder)
        if storable.nested_too_deeply(headers or {}, MAX_HEADER_DEPTH):
            raise ValueError(
                f"A header is nested too deeply: at most {MAX_HEADER_DEPTH} "
                "levels are published"
            )
    except ValueError as exc:
        raise EventInvalid(f"{exc}.") from exc


def debezium_unsupported(using: str) -> str | None:
    """Why Debezium mode cannot capture events in ``using``, or None."""
    connection = connections[using]
    if outbox_settings.RELAY != DEBEZIUM or connection.vendor == "postgresql":
        return None
    return (
        f"OUTBOX['RELAY'] is 'debezium', but the outbox table's database "
        f"{using!r} is {connection.display_name}: Debezium reads PostgreSQL's "
        "write-ahead log, and record() deletes each row it inserts, so every "
        "event would be lost. Use PostgreSQL, or RELAY 'celery'."
    )


def _intent_header(intent: str) -> dict:
    """The header naming the intent the running code serves, if any."""
    return {INTENT_HEADER: intent} if intent else {}


def _debezium_span_context(headers):
    """Debezium's router reads the trace context from its own column."""
    if outbox_settings.RELAY != DEBEZIUM:
        return ""
    return tracing.java_properties(headers)


def _after_the_aggregates_last(using, aggregate_type, aggregate_id) -> datetime:
    """Now, or just after the aggregate's last unpublished event if that is
    later: the relay publishes an aggregate's events in created_at order, and
    the previous writer may have run on a host whose clock is ahead."""
    now = clock.now()
    last = (
        OutboxMessage.objects.using(using)
        .filter(aggregatetype=aggregate_type, aggregateid=aggregate_id)
        .exclude(state=OutboxMessage.State.PUBLISHED)
        .aggregate(last=Max("created_at"))["last"]
    )
    if last is None or last < now:
        return now
    return last + timedelta(microseconds=1)


def _lock_aggregate(connection, aggregate_type, aggregate_id):
    """Serialize writers of one aggregate until their transaction ends.

    Commit order is not id order: without this, a later event could commit (and
    be published) before an earlier one of the same aggregate.
    """
    if connection.vendor != "postgresql":
        return  # SQLite has one writer at a time already.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"outbox\x1f{aggregate_type}\x1f{aggregate_id}"],
        )
