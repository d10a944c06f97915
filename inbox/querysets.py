"""Queries on inbox messages, named by intent."""

from typing import TYPE_CHECKING

from django.db import connections, models

from idempotency.shared.inserts import insert_shape

if TYPE_CHECKING:  # the models import these querysets
    from .models import InboxMessage  # noqa: F401 (named in QuerySet[...])

# (statement builder, database alias) -> its SQL: built once, since receive()
# runs a claim for every delivery.
_statements: dict[tuple, str] = {}
_CLAIMED = ("subscriber", "message_id", "received_at", "duplicates", "state")
_RUNNING_CLAIMED = (*_CLAIMED, "locked_until")
_BURIED = (
    "subscriber",
    "message_id",
    "duplicates",
    "received_at",
    "state",
    "attempts",
    "last_error",
    "redrive",
)
# States as the SQL below spells them (InboxMessage.State; the models import
# this module, so it cannot import them).
APPLIED, DEAD, RUNNING = "applied", "dead", "running"
# claim_running()'s answer when another worker's lease is live (no state).
BUSY = "busy"


class InboxMessageQuerySet(models.QuerySet["InboxMessage"]):
    def for_message(self, subscriber, message_id):
        return self.filter(subscriber=subscriber, message_id=message_id)

    def purgeable(self, now, retention):
        # A dead row is the only trace of a message nothing applied: it stays
        # until a replay applies it. A running one is a steps consumer's
        # mid-way: forgotten, its redelivery would look new.
        return self.filter(received_at__lt=now - retention).exclude(
            state__in=(DEAD, RUNNING)
        )

    def dead(self):
        return self.filter(state=DEAD)

    def with_duplicates(self):
        return self.filter(duplicates__gt=0)

    def running(self):
        return self.filter(state=RUNNING)


_BaseManager = models.Manager.from_queryset(InboxMessageQuerySet)


class InboxMessageManager(_BaseManager):
    # On the manager, not the queryset: receive() runs it for every delivery,
    # and an INSERT needs no QuerySet built first.
    def claim(self, subscriber, message_id, now, *, using) -> bool:
        """Insert the row, or count a duplicate on it; return whether inserted.

        One statement either way: ``INSERT … ON CONFLICT DO UPDATE`` never
        aborts the caller's transaction. A concurrent insert of the same id
        blocks on the unique index until its transaction ends, then this one
        counts a duplicate (or inserts, if that one rolled back): no
        check-then-insert.
        """
        values = {
            "subscriber": subscriber,
            "message_id": message_id,
            "received_at": now,
            "duplicates": 0,
            "state": APPLIED,
        }
        (duplicates,) = self._upsert(_CLAIMED, _claim_sql, values, using=using)
        # A new row starts at 0, a dead one is taken over at 0 (nothing was
        # applied, so nothing was dropped); an applied one has just gone to 1+.
        return duplicates == 0

    def claim_running(self, subscriber, message_id, now, lease, *, using) -> str:
        """A steps consumer's claim, with a lease: insert the row as running,
        take over a dead one or one whose lease lapsed (a crash left it), or
        count a duplicate on an applied one. Returns ``RUNNING`` (run or
        resume the steps), ``APPLIED`` (a duplicate) or ``BUSY`` (another
        worker's lease is live).

        One statement in autocommit, so the claim is committed before the
        first step runs, and two workers racing for a lapsed lease cannot
        both take it: the second one's update waits for the first's row
        lock, then finds the new lease.
        """
        return self.claim_running_counted(
            subscriber, message_id, now, lease, using=using
        )[0]

    def claim_running_counted(
        self, subscriber, message_id, now, lease, *, using
    ) -> tuple[str, int]:
        """``claim_running()``, with the runs of the delivery that ended
        without an ack (``count_lost_run()``) since it was last taken over
        dead: 0 for a new one."""
        values = {
            "subscriber": subscriber,
            "message_id": message_id,
            "received_at": now,
            "duplicates": 0,
            "state": RUNNING,
            "locked_until": now + lease,
        }
        row = self._upsert(_RUNNING_CLAIMED, _running_claim_sql, values, using=using)
        return (row[0], row[1]) if row else (BUSY, 0)

    def release(self, subscriber, message_id, *, held, using) -> None:
        """Let a running delivery's lease go: the attempt holding it failed,
        and its retry (or any redelivery) resumes it at once."""
        self.renew(subscriber, message_id, None, held=held, using=using)

    def renew(self, subscriber, message_id, locked_until, *, held, using) -> bool:
        """Extend a running delivery's lease (its steps progress); False when
        ``held``, the lease this worker set, is no longer the row's."""
        # Fenced on the lease: a worker whose lease lapsed and was taken over
        # must not clear or extend the newer worker's.
        return bool(
            self.db_manager(using)
            .for_message(subscriber, message_id)
            .filter(state=RUNNING, locked_until=held)
            .update(locked_until=locked_until)
        )

    def holds(self, subscriber, message_id, *, held, using) -> bool:
        """Whether ``held``, the lease a worker set, is still the running
        delivery's: not once a redelivery took the lapsed lease over (or
        applied the delivery). Locks the row, inside the caller's
        transaction: a redelivery's claim waits until that transaction ends
        (the unit joined), so it cannot take the lease over, and join the
        unit first, between this answer and the join it allows."""
        return (
            self.db_manager(using)
            .for_message(subscriber, message_id)
            .filter(state=RUNNING, locked_until=held)
            .select_for_update()
            .exists()
        )

    def finish_running(self, subscriber, message_id, *, using) -> int:
        """Mark a steps consumer's delivery applied: a redelivery is a duplicate
        from now on. Returns 1, or 0 when it was not running (finished by
        another worker already)."""
        return (
            self.db_manager(using)
            .for_message(subscriber, message_id)
            .filter(state=RUNNING)
            .update(state=APPLIED, locked_until=None)
        )

    def bury(
        self, subscriber, message_id, now, *, attempts, error, redrive, using
    ) -> bool:
        """Record that every attempt at ``message_id`` raised: a dead row.

        One statement, in its own transaction (the attempts' rolled back). A
        row some other delivery applied meanwhile is left applied: False.
        """
        values = _dead_row(subscriber, message_id, now, attempts, error, redrive)
        return self._upsert(_BURIED, _bury_sql, values, using=using) is not None

    def count_lost_run(self, subscriber, message_id, now, *, error, redrive, using):
        """Record that a run of ``message_id`` ended without an ack (its worker
        died: out of memory, a hard time limit), before the redelivery runs.
        Return the runs lost so far, or None when another delivery applied
        the message or a steps consumer holds it: its run is counted on the
        running row, and the claim that takes its lease over gives the unit
        up once they used the attempts up (``claim_running_counted``).

        One statement in autocommit, so the count outlives this run's death
        too: the row is dead until a run applies the message (its claim takes
        a dead row over), and a replay can send it again.
        """
        values = _dead_row(subscriber, message_id, now, 1, error, redrive)
        row = self._upsert(_BURIED, _lost_run_sql, values, using=using)
        return row[0] if row and row[1] == DEAD else None

    def _upsert(self, columns, build_sql, values, *, using):
        """Run one of the statements above: built once per database, sent as
        one statement. Returns the row it returned, or None."""
        connection = connections[using]
        insert = insert_shape(self.model, connection, columns)
        key = (build_sql, using)
        sql = _statements.get(key) or _statements.setdefault(
            key, build_sql(insert, connection)
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, insert.params(values, connection))
            return cursor.fetchone() if cursor.description else None


def _dead_row(subscriber, message_id, now, attempts, error, redrive) -> dict:
    """The values of a dead row (``_BURIED``'s columns)."""
    return {
        "subscriber": subscriber,
        "message_id": message_id,
        "received_at": now,
        "duplicates": 0,
        "state": DEAD,
        "attempts": attempts,
        "last_error": error,
        "redrive": redrive,
    }


def _on_conflict(insert, connection) -> str:
    unique = next(
        constraint
        for constraint in insert.fields[0].model._meta.constraints
        if constraint.name == "inbox_unique_message"
    )
    return f"ON CONFLICT ({insert.conflict_target(connection, unique.fields)})"


def _claim_sql(insert, connection) -> str:
    duplicates, received, state = _quoted(
        insert, connection, "duplicates", "received_at", "state"
    )
    # Every right-hand side reads the row as it was: a dead row is taken
    # over (applied from now on, remembered from now on), an applied one
    # counts a duplicate.
    was_dead = f"{insert.table}.{state} = '{DEAD}'"
    return (
        f"{insert.sql} {_on_conflict(insert, connection)} DO UPDATE SET "
        f"{duplicates} = {insert.table}.{duplicates} "
        f"+ CASE WHEN {was_dead} THEN 0 ELSE 1 END, "
        f"{received} = CASE WHEN {was_dead} THEN excluded.{received} "
        f"ELSE {insert.table}.{received} END, "
        f"{state} = '{APPLIED}' "
        f"RETURNING {duplicates}"
    )


def _running_claim_sql(insert, connection) -> str:
    duplicates, received, state, locked, attempts = _quoted(
        insert,
        connection,
        "duplicates",
        "received_at",
        "state",
        "locked_until",
        "attempts",
    )
    # As in _claim_sql, the right-hand sides read the row as it was: an
    # applied one counts a duplicate and stays applied; a dead one, or a
    # running one whose lease lapsed, is taken over with a new lease. A
    # running one under a live lease is left alone: no row comes back.
    was = f"{insert.table}.{state}"
    applied = f"{was} = '{APPLIED}'"
    return (
        f"{insert.sql} {_on_conflict(insert, connection)} DO UPDATE SET "
        f"{duplicates} = {insert.table}.{duplicates} "
        f"+ CASE WHEN {applied} THEN 1 ELSE 0 END, "
        f"{received} = CASE WHEN {was} = '{DEAD}' THEN excluded.{received} "
        f"ELSE {insert.table}.{received} END, "
        f"{locked} = CASE WHEN {applied} THEN {insert.table}.{locked} "
        f"ELSE excluded.{locked} END, "
        f"{state} = CASE WHEN {applied} THEN '{APPLIED}' ELSE '{RUNNING}' END, "
        # The lost runs a running row counts start again from a dead one:
        # a replay gets its runs.
        f"{attempts} = CASE WHEN {was} = '{DEAD}' THEN 0 "
        f"ELSE {insert.table}.{attempts} END "
        f"WHERE NOT ({was} = '{RUNNING}' AND {insert.table}.{locked} IS NOT NULL "
        f"AND {insert.table}.{locked} > excluded.{received}) "
        f"RETURNING {state}, {attempts}"
    )


def _bury_sql(insert, connection) -> str:
    *buried, state = _quoted(insert, connection, *_BURIED[3:], "state")
    updated = ", ".join(f"{column} = excluded.{column}" for column in buried)
    return (
        f"{insert.sql} {_on_conflict(insert, connection)} DO UPDATE SET {updated} "
        # A running row is a steps consumer's that gave up: dead now too.
        f"WHERE {insert.table}.{state} IN ('{DEAD}', '{RUNNING}') "
        # A row only when buried: not when left applied.
        f"RETURNING {state}"
    )


def _lost_run_sql(insert, connection) -> str:
    attempts, error, redrive, state = _quoted(
        insert, connection, "attempts", "last_error", "redrive", "state"
    )
    return (
        f"{insert.sql} {_on_conflict(insert, connection)} DO UPDATE SET "
        f"{attempts} = {insert.table}.{attempts} + 1, "
        f"{error} = excluded.{error}, {redrive} = excluded.{redrive} "
        # A running row is a steps consumer's: counted, and left running.
        f"WHERE {insert.table}.{state} IN ('{DEAD}', '{RUNNING}') "
        f"RETURNING {attempts}, {state}"
    )


def _quoted(insert, connection, *names) -> list[str]:
    """The quoted columns of the named fields, in order."""
    opts = insert.fields[0].model._meta
    return [connection.ops.quote_name(opts.get_field(name).column) for name in names]
