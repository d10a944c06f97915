"""The relay: claim due messages, publish them, write the outcome back.

Each batch goes through three steps, and no step holds a lock across the
network:

1. claim: one short transaction picks due rows with ``FOR UPDATE SKIP LOCKED``
   (several relays never pick the same row), bumps ``attempts`` and sets a
   lease, and commits;
2. publish the whole batch at once (``publish_many``: pipelined, each message
   still verified), outside any transaction;
3. write back in one statement (per 1,000 messages), fenced on
   ``(id, attempts)``: a relay that outlived its lease cannot overwrite the
   result of the newer claimant.

A crash between 2 and 3 republishes after the lease: delivery is at least
once, and consumers dedupe on the message id (the inbox).
"""

import logging
import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from django.db import OperationalError, connections, models, router, transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.sql import UpdateQuery

from idempotency.shared import clock, databases, isolation, storable, tracing
from idempotency.shared.settings import InvalidSetting, as_timedelta, duration
from idempotency.shared.settings import seconds as in_seconds

from . import signals
from .conf import DEBEZIUM, outbox_settings
from .conf import batch_size as checked_batch_size
from .exceptions import OutboxConfigurationError, PublishError
from .models import OutboxMessage

State = OutboxMessage.State
logger = logging.getLogger("outbox")
# Claims in a row that may meet rows other relays just leased (under REPEATABLE
# READ or SERIALIZABLE) before this one leaves the backlog to them.
RACED_CLAIMS = 3
# Messages per write-back statement. A failed message takes about seven of
# its parameters, and a statement holds at most 65,535 under server-side
# binding (32,766 on SQLite): a larger batch's write-back failed whole, left
# the batch leased, and it went out again after every lease.
WRITE_BACK_CHUNK = 1000
# What a claim sets to the lease's end.
LEASE_COLUMNS = ("available_at", "locked_until")


@dataclass
class DrainResult:
    published: int = 0
    failed: int = 0
    dead: int = 0
    batches: int = 0
    # The time budget ran out after a full batch: more may be due.
    unfinished: bool = False

    def __add__(self, other):
        return DrainResult(
            self.published + other.published,
            self.failed + other.failed,
            self.dead + other.dead,
            self.batches + other.batches,
            self.unfinished or other.unfinished,
        )


def drain(
    *,
    batch_size: int | None = None,
    time_budget: float | timedelta | None = None,
    publisher=None,
    using: str | None = None,
) -> DrainResult:
    """Publish due messages until none is left or the time budget is spent."""
    if outbox_settings.RELAY == DEBEZIUM:
        logger.warning("OUTBOX['RELAY'] is 'debezium': the Celery relay stays idle.")
        return DrainResult()
    # Checked as the settings are, before any claim: a negative batch size,
    # one past the claim's bigint or a budget a timedelta cannot hold raised
    # errors that named neither; 0 quietly meant the setting.
    if batch_size is None:
        batch_size = outbox_settings.BATCH_SIZE
    else:
        batch_size = _argument("batch_size", checked_batch_size, batch_size)
    if time_budget is None:
        budget = as_timedelta(outbox_settings.TIME_BUDGET)
    else:
        budget = _argument("time_budget", duration, time_budget)
    deadline = time.monotonic() + budget.total_seconds()
    result = DrainResult()
    with publisher or make_publisher() as active:
        while True:
            batch = claim(batch_size, using=using)
            if not batch:
                break
            result += publish_batch(batch, active, using=using)
            if time.monotonic() >= deadline:
                # A partial batch took every due message there was.
                result.unfinished = len(batch) == batch_size
                break
    return result


def _argument(name, validate, value):
    """``value`` as ``validate`` takes it, or a ValueError naming ``name``."""
    try:
        return validate(value)
    except InvalidSetting as exc:
        raise ValueError(f"drain() {name} {exc}") from None


def make_publisher():
    publisher = outbox_settings.PUBLISHER
    try:
        made = publisher(**outbox_settings.PUBLISHER_OPTIONS)
    except TypeError as exc:  # a misspelled or missing option
        raise OutboxConfigurationError(
            f"OUTBOX['PUBLISHER_OPTIONS'] do not fit {publisher.__qualname__}: {exc}"
        ) from exc
    if why := lapsing_lease(made):
        raise OutboxConfigurationError(why)
    return made


def lapsing_lease(publisher) -> str | None:
    """Why LEASE would lapse while ``publisher`` still awaits the broker, or
    None: the next relay would claim that batch and publish it again."""
    lease = as_timedelta(outbox_settings.LEASE).total_seconds()
    wait = publisher.longest_wait()
    if lease > wait:
        return None
    return (
        f"OUTBOX['LEASE'] ({in_seconds(lease)}) is not longer than "
        f"{type(publisher).__name__}'s wait on the broker ({in_seconds(wait)}): "
        "a batch still awaited would be claimed and published again. Raise "
        "LEASE, or lower the publisher's confirm_timeout or connect_timeout."
    )


def claim(limit: int, *, using: str | None = None) -> list[OutboxMessage]:
    """Lease up to ``limit`` due messages to this relay and return them."""
    using = using or router.db_for_write(OutboxMessage)
    # The lease must commit before any publish, and each mark after it.
    databases.refuse_unusable(using, OutboxConfigurationError)
    now = clock.now()
    lease_end = now + as_timedelta(outbox_settings.LEASE)
    for _round in range(RACED_CLAIMS):
        try:
            # A transaction of its own, committed before any publish: the row
            # locks last one statement, and the lease (not a lock) keeps
            # other relays off.
            with transaction.atomic(using=using):
                sql, params = _claim_sql(using, now, lease_end, limit)
                batch = list(OutboxMessage.objects.db_manager(using).raw(sql, params))
            break
        except OperationalError as exc:
            # REPEATABLE READ or SERIALIZABLE: another relay leased a picked
            # row after this claim's snapshot (idempotency.shared.isolation).
            if not isolation.is_serialization_failure(exc):
                raise
    else:
        return []  # the others are draining: this relay's turn comes again
    for message in batch:
        # The lease columns the claim set, not read back (see _claim_sql()).
        message.available_at = message.locked_until = lease_end
    # RETURNING has no order; publish oldest first. Ties on created_at (a
    # batch recorded at once) compare the ids' ints: UUIDs compare in Python.
    batch.sort(key=lambda message: (message.created_at, message.id.int))
    return batch


def _claim_sql(using, now, lease_end, limit):
    """One statement that picks the claimable messages and leases them."""
    connection = connections[using]
    picked = OutboxMessage.objects.db_manager(using).claimable(now)
    if outbox_settings.ORDERED:
        # A message waits while an older one of its aggregate is unpublished;
        # record() serialized their commits.
        picked = picked.first_unpublished_of_their_aggregate()
    picked = picked.order_by("available_at").values("id")[:limit]
    if connection.features.has_select_for_update_skip_locked:
        # SKIP LOCKED: a row another relay is claiming right now is left to it
        # instead of waiting for it (SQLite has one writer and no row locks).
        picked = picked.select_for_update(skip_locked=True)
    select, params = picked.query.get_compiler(using).as_sql()
    quote = connection.ops.quote_name
    table = quote(OutboxMessage._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    # Every column but the two the UPDATE sets to the lease end: claim() knows
    # them. Reading them back parsed two timestamps a row, a quarter of the
    # claim's CPU (5 of 21 microseconds a message, measured side by side on
    # a 5,000-message drain when this changed; the relay's CPU per message is
    # in docs/benchmarks.md, "Outbox relay").
    returned = ", ".join(
        quote(field.column)
        for field in OutboxMessage._meta.concrete_fields
        if field.column and field.attname not in LEASE_COLUMNS
    )
    # One statement, no RETURNING in the ORM's update(). MATERIALIZED: the
    # locking subquery must run once, not per outer row.
    sql = (
        f"WITH picked AS MATERIALIZED ({select}) "
        f"UPDATE {table} SET attempts = attempts + 1, locked_until = %s, "
        # Moving available_at to the lease end keeps leased rows at the back of
        # the due index, so the next claim does not scan past them.
        "available_at = %s "
        f"WHERE id IN (SELECT id FROM picked) RETURNING {returned}"
    )
    return sql, (*params, adapt(lease_end), adapt(lease_end))


def publish_batch(batch, publisher, *, using: str | None = None) -> DrainResult:
    """Publish claimed messages at once, then write every outcome back in one
    fenced statement."""
    started = time.monotonic()
    failed: dict = {}  # message id -> why its attempt failed
    due = []
    for message in batch:
        if (
            message.attempts - message.requeued_at_attempt
            > outbox_settings.MAX_ATTEMPTS
        ):
            # Its leases kept lapsing (a relay crashing on it): stop here.
            failed[message.id] = "lease lapsed on every attempt"
        else:
            due.append(message)
    with tracing.sending(due) as span:
        try:
            refused = (
                _refusals(publisher, publisher.publish_many(due), due) if due else {}
            )
        except Exception as exc:  # a publisher must not strand its batch
            refused = dict.fromkeys((message.id for message in due), exc)
        tracing.refused(span, len(refused), len(due))
    for message in due:
        if (error := refused.get(message.id)) is not None:
            # Logged with its outcome (backing off, or dead) by write_back.
            failed[message.id] = f"{type(error).__name__}: {error}"
    outcomes = write_back(batch, failed, using=using, started=started)
    return DrainResult(
        published=outcomes[State.PUBLISHED],
        failed=outcomes[State.PENDING],
        dead=outcomes[State.DEAD],
        batches=1,
    )


def _refusals(publisher, refused, batch) -> dict:
    """``publish_many()``'s answer keyed by message id, or PublishError: a
    key naming no message of the batch, or an answer that is no mapping at
    all, would count a refused message published."""
    name = f"{type(publisher).__qualname__}.publish_many()"
    if not isinstance(refused, Mapping):
        raise PublishError(
            f"{name} returned {type(refused).__name__}, not a mapping of the "
            "refused message ids."
        )
    if not refused:
        return {}  # the usual answer: no message's id to read
    # A message id as a UUID, or as the text the headers carry.
    ids = {
        key: message.id for message in batch for key in (message.id, str(message.id))
    }
    for key in refused:
        if key not in ids:
            raise PublishError(
                f"{name} refused {key!r}, which names no message of its batch."
            )
    # A key with no error (None) still refuses its message: counted
    # published, it would never reach a consumer.
    nameless = PublishError(f"{name} refused it without an error.")
    return {
        ids[key]: nameless if error is None else error for key, error in refused.items()
    }


def write_back(
    messages, failed, *, using: str | None = None, started: float | None = None
) -> Counter:
    """Record the outcome of claimed ``messages`` in one statement (per
    ``WRITE_BACK_CHUNK`` messages): those in ``failed`` (id -> error) back off
    or go dead, the others are published. ``started``: when the batch's
    publish began (``time.monotonic()``), to report how long the batch took.

    Return how many rows went to each state; a message a newer claim owns is
    left alone and counted nowhere.
    """
    messages = list(messages)
    if not messages:
        return Counter()
    using = using or router.db_for_write(OutboxMessage)
    now = clock.now()
    rows: list = []
    try:
        for start in range(0, len(messages), WRITE_BACK_CHUNK):
            chunk = messages[start : start + WRITE_BACK_CHUNK]
            errors = {m.id: failed[m.id] for m in chunk if m.id in failed}
            rows += _write_back_chunk(chunk, errors, now, using)
    finally:
        # Each chunk commits on its own: when a later one fails, what the
        # earlier ones wrote stands and is reported (inside a caller's
        # transaction, the rollback drops the report with the rows).
        # SQLite returns the ids as text: read them as the model does.
        to_uuid = OutboxMessage._meta.pk.to_python
        states = {to_uuid(pk): state for pk, state in rows}
        _report(messages, failed, states, now, using, started)
    return Counter(state for _id, state in rows)


def _write_back_chunk(messages, failed, now, using) -> list:
    """One fenced UPDATE for ``messages``; return the (id, state) it wrote."""
    dead, retry = [], {}
    for message in messages:
        if message.id in failed:
            used = message.attempts - message.requeued_at_attempt
            if used >= outbox_settings.MAX_ATTEMPTS:
                dead.append(message.id)
            else:
                retry[message.id] = now + backoff(used)
    state_cases = []
    if dead:
        state_cases.append(When(pk__in=dead, then=Value(State.DEAD)))
    if failed:
        state_cases.append(When(pk__in=list(failed), then=Value(State.PENDING)))
    changes = {
        "locked_until": None,
        "state": Case(*state_cases, default=Value(State.PUBLISHED)),
        "published_at": Case(
            *([When(pk__in=list(failed), then=F("published_at"))] if failed else []),
            default=_datetime(now),
        ),
        "available_at": Case(
            *(When(pk=pk, then=_datetime(at)) for pk, at in retry.items()),
            default=F("available_at"),
        ),
        "last_error": Case(
            # Escaped: a NUL in one publisher's error would fail the statement,
            # and with it the write-back of the whole batch.
            *(
                When(pk=pk, then=Value(storable.text(error)[:2000]))
                for pk, error in failed.items()
            ),
            default=Value(""),
        ),
    }
    by_attempt = defaultdict(list)
    for message in messages:
        by_attempt[message.attempts].append(message.id)
    # Fenced on attempts: a newer claimant bumped it, and its result wins.
    fence = Q()
    for attempts, ids in by_attempt.items():
        fence |= Q(attempts=attempts, pk__in=ids)
    return _update_returning(
        OutboxMessage.objects.db_manager(using).filter(fence, state=State.PENDING),
        changes,
        "id",
        "state",
    )


def _report(messages, failed, states, now, using, started):
    """Log and signal what was written back: ``states`` maps each message
    this relay still owned to its new state."""
    published = []
    for message in messages:
        state = states.get(message.id)
        if state == State.PUBLISHED:
            published.append(message)
        elif state is not None:
            error = failed[message.id]
            signals.failed(message, error, dead=state == State.DEAD, using=using)
    if published:
        seconds = None if started is None else time.monotonic() - started
        signals.published(published, now, seconds=seconds, using=using)


def _datetime(value):
    return Value(value, output_field=models.DateTimeField())


def _update_returning(queryset, changes, *columns):
    """Run ``queryset.update(**changes)`` with ``RETURNING columns``: one
    statement that also says which rows it changed (PostgreSQL and SQLite)."""
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(changes)
    connection = connections[queryset.db]
    update, params = query.get_compiler(queryset.db).as_sql()
    if not update:
        return []
    returning = ", ".join(connection.ops.quote_name(column) for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"{update} RETURNING {returning}", params)
        return cursor.fetchall()


def mark_published(messages, *, using: str | None = None) -> int:
    """Mark messages published; a claim that lost its lease is left alone."""
    return write_back(messages, {}, using=using)[State.PUBLISHED]


def mark_failed(message, error: str, *, using: str | None = None):
    """Back off (or bury) a failed message; return its new state, or None when
    a newer claim owns it."""
    outcomes = write_back([message], {message.id: error}, using=using)
    return next(iter(outcomes), None)


def backoff(attempt: int) -> timedelta:
    """Full jitter: a delay drawn uniformly below an exponential ceiling."""
    return backoff_ceiling(attempt) * random.random()


def backoff_ceiling(attempt: int) -> timedelta:
    base = as_timedelta(outbox_settings.BACKOFF_BASE)
    cap = as_timedelta(outbox_settings.BACKOFF_MAX)
    # Double no further than it takes to reach the cap: base·2ⁿ⁻¹ itself
    # overflows timedelta (an OverflowError in write_back, stranding the whole
    # batch) at the attempt counts a long broker outage reaches.
    doublings = max(0, math.ceil(math.log2(cap / base)))
    return min(cap, base * 2 ** min(attempt - 1, doublings))
