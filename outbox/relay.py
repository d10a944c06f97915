"""The relay: claim due messages, publish them, write the outcome back.

Each batch goes through three steps, and no step holds a lock across the
network:

1. claim: one short transaction picks due rows with ``FOR UPDATE SKIP LOCKED``
   (several relays never pick the same row), bumps ``attempts`` and sets a
   lease, and commits;
2. publish, outside any transaction;
3. write back, fenced on ``(id, attempts)``: a relay that outlived its lease
   cannot overwrite the result of the newer claimant.

A crash between 2 and 3 republishes after the lease: delivery is at least
once, and consumers dedupe on the message id (the inbox).
"""

import logging
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

from django.db import connections, router, transaction

from idempotency.shared import clock
from idempotency.shared.settings import as_timedelta

from .conf import DEBEZIUM, outbox_settings
from .models import OutboxMessage

State = OutboxMessage.State
logger = logging.getLogger("outbox")


@dataclass
class DrainResult:
    published: int = 0
    failed: int = 0
    dead: int = 0
    batches: int = 0

    def __add__(self, other):
        return DrainResult(
            self.published + other.published,
            self.failed + other.failed,
            self.dead + other.dead,
            self.batches + other.batches,
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
    batch_size = batch_size or outbox_settings.BATCH_SIZE
    budget = as_timedelta(time_budget or outbox_settings.TIME_BUDGET)
    deadline = time.monotonic() + budget.total_seconds()
    result = DrainResult()
    with publisher or make_publisher() as active:
        while True:
            batch = claim(batch_size, using=using)
            if not batch:
                break
            result += publish_batch(batch, active, using=using)
            if time.monotonic() >= deadline:
                break
    return result


def make_publisher():
    return outbox_settings.PUBLISHER(**outbox_settings.PUBLISHER_OPTIONS)


def claim(limit: int, *, using: str | None = None) -> list[OutboxMessage]:
    """Lease up to ``limit`` due messages to this relay and return them."""
    using = using or router.db_for_write(OutboxMessage)
    connection = connections[using]
    now = clock.now()
    lease_end = now + as_timedelta(outbox_settings.LEASE)
    sql, params = _claim_sql(connection, now, lease_end, limit)
    # A transaction of its own, committed before any publish: the row locks
    # last one statement, and the lease (not a lock) keeps other relays off.
    with transaction.atomic(using=using):
        batch = list(OutboxMessage.objects.db_manager(using).raw(sql, params))
    # RETURNING has no order; publish oldest first.
    batch.sort(key=lambda message: (message.created_at, message.id))
    return batch


def _claim_sql(connection, now, lease_end, limit):
    table = connection.ops.quote_name(OutboxMessage._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    # SKIP LOCKED: a row another relay is claiming right now is left to it
    # instead of waiting for it (SQLite has one writer and no row locks).
    lock = "FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    ordered = ""
    params = [adapt(now), adapt(now)]
    if outbox_settings.ORDERED:
        # A message waits while an older one of its aggregate is unpublished
        # (pending, leased or dead); record() serialized their commits.
        ordered = (
            f"AND NOT EXISTS (SELECT 1 FROM {table} AS older "
            "WHERE older.aggregatetype = m.aggregatetype "
            "AND older.aggregateid = m.aggregateid "
            f"AND older.state <> '{State.PUBLISHED}' "
            "AND (older.created_at < m.created_at OR "
            "(older.created_at = m.created_at AND older.id < m.id)))"
        )
    # MATERIALIZED: the locking subquery must run once, not per outer row.
    sql = (
        f"WITH picked AS MATERIALIZED (SELECT m.id FROM {table} AS m "
        # The state as a literal, not a parameter: the planner matches it to
        # the partial index on due messages.
        f"WHERE m.state = '{State.PENDING}' AND m.available_at <= %s "
        "AND (m.locked_until IS NULL OR m.locked_until <= %s) "
        f"{ordered} ORDER BY m.available_at LIMIT %s {lock}) "
        f"UPDATE {table} SET attempts = attempts + 1, locked_until = %s, "
        # Moving available_at to the lease end keeps leased rows at the back of
        # the due index, so the next claim does not scan past them.
        "available_at = %s "
        "WHERE id IN (SELECT id FROM picked) RETURNING *"
    )
    params += [limit, adapt(lease_end), adapt(lease_end)]
    return sql, params


def publish_batch(batch, publisher, *, using: str | None = None) -> DrainResult:
    """Publish claimed messages and write each outcome back, fenced."""
    published, failed = [], []
    for message in batch:
        if (
            message.attempts - message.requeued_at_attempt
            > outbox_settings.MAX_ATTEMPTS
        ):
            # Its leases kept lapsing (a relay crashing on it): stop here.
            failed.append((message, "lease lapsed on every attempt"))
            continue
        try:
            publisher.publish(message)
        except Exception as exc:  # any failure is a failed attempt
            logger.warning("Publishing %s failed", message.id, exc_info=True)
            failed.append((message, f"{type(exc).__name__}: {exc}"))
        else:
            published.append(message)
    result = DrainResult(batches=1)
    result.published = mark_published(published, using=using)
    for message, error in failed:
        outcome = mark_failed(message, error, using=using)
        if outcome == State.DEAD:
            result.dead += 1
        elif outcome == State.PENDING:
            result.failed += 1
    return result


def mark_published(messages, *, using: str | None = None) -> int:
    """Mark messages published; a claim that lost its lease is left alone."""
    manager = _manager(using)
    by_attempt = defaultdict(list)
    for message in messages:
        by_attempt[message.attempts].append(message.pk)
    now = clock.now()
    count = 0
    for attempts, ids in by_attempt.items():
        # Fenced on attempts: a newer claimant bumped it, and its result wins.
        count += manager.filter(
            pk__in=ids, attempts=attempts, state=State.PENDING
        ).update(
            state=State.PUBLISHED, published_at=now, locked_until=None, last_error=""
        )
    return count


def mark_failed(message, error: str, *, using: str | None = None):
    """Back off (or bury) a failed message; return its new state, or None when
    a newer claim owns it."""
    now = clock.now()
    used = message.attempts - message.requeued_at_attempt
    if used >= outbox_settings.MAX_ATTEMPTS:
        changes = {"state": State.DEAD}
    else:
        changes = {"available_at": now + backoff(used)}
    updated = (
        _manager(using)
        .filter(pk=message.pk, attempts=message.attempts, state=State.PENDING)
        .update(locked_until=None, last_error=error[:2000], **changes)
    )
    return changes.get("state", State.PENDING) if updated else None


def backoff(attempt: int) -> timedelta:
    """Full jitter: a delay drawn uniformly below an exponential ceiling."""
    return backoff_ceiling(attempt) * random.random()


def backoff_ceiling(attempt: int) -> timedelta:
    base = as_timedelta(outbox_settings.BACKOFF_BASE)
    cap = as_timedelta(outbox_settings.BACKOFF_MAX)
    # Capping the exponent first keeps 2**n small for a long-dead broker.
    return min(cap, base * 2 ** min(attempt - 1, 40))


def _manager(using):
    return OutboxMessage.objects.db_manager(using or router.db_for_write(OutboxMessage))
