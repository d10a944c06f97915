"""Durable steps: each outside call runs once per unit, and a retry resumes.

``begin(unit, ...)`` commits the unit's row (joining it bumps its attempt,
the fence) and returns a ``Steps`` handle. ``handle.step(name, fn)`` calls
``fn(unit.derive(name))`` outside any transaction, then commits its JSON
result as a recovery point, fenced on the attempt; a later attempt gets that
result back without calling ``fn``. A crash between the call and the
recovery point calls ``fn`` again with the same key: at least once outside,
deduplicated downstream by the key (rule 7).
"""

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import DatabaseError, IntegrityError, connections, router, transaction
from django.db.models import Value
from django.db.models.functions import Concat
from django.utils.module_loading import import_string

from .. import clock, signals, storable, tracing
from ..inserts import insert_or_update, insert_shape
from ..stepnames import UNDO_PREFIX
from ..units import SEPARATOR, Unit, running
from .exceptions import (
    Abandon,
    StepError,
    StepInTransaction,
    StepResultNotJSON,
    StepTakenOver,
    UndoNotImportable,
)
from .models import StepRecord, UnitRecord

logger = logging.getLogger("idempotency.steps")
# Steps and compensations are logged on the shared logger, as the purge is.
report = signals.Reporter("idempotency", "idempotency.UnitRecord")

UnitState = UnitRecord.State
StepState = StepRecord.State
GIVEN_UP = (UnitState.COMPENSATING, UnitState.COMPENSATED)
# A step's error as the console shows it: enough to tell what went wrong.
MAX_ERROR = 2000

# Called with the new lease expiry while steps progress: the owner (a keyed
# request's record, say) extends its own lease so nobody takes it over.
Renew = Callable[[datetime], None]


def begin(
    unit: Unit,
    label: str,
    *,
    lease: timedelta,
    using: str | None = None,
    fresh: bool = False,
    renew: Renew | None = None,
    held: Callable[[], bool] | None = None,
) -> "Steps":
    """Create or join ``unit``'s row, committed on its own; return its handle.

    Joining a running (or finished) unit takes it over: the attempt goes up,
    so the attempt before stores nothing more, and the lease starts again.
    ``fresh``: the owner's record began its life now (a new key, or one past
    its retention), so an old row of the same identity is stale and starts
    over, unless it is still compensating (it owes undos). ``label`` says
    what the unit is, for the console: never put a raw client key in it.
    ``renew`` is called with the new lease expiry at most
    every half lease, after a step's recovery point commits, one call at a
    time whichever threads the steps run on. ``held`` is
    asked first in the transaction that joins an existing row, and may lock
    the owner's record: False when the owner lost its claim while it waited
    to begin, which then joins nothing (``StepTakenOver``): a stalled owner
    would take over (or reopen, once finished) the unit a newer attempt
    runs, and a ``fresh`` one would start it over.
    """
    db = using or router.db_for_write(UnitRecord)
    if connections[db].in_atomic_block:
        raise StepInTransaction(
            "begin() commits the unit on its own: call it outside transaction.atomic()."
        )
    now = clock.now()
    if fresh:
        # The owner's record is new, so its unit most likely is too: one
        # statement, with no transaction and no steps to read back.
        row = _inserted(unit, label, db, now, lease)
        if row is not None:
            return Steps(unit, row, lease=lease, using=db, results={}, renew=renew)
    with transaction.atomic(using=db):
        if held is not None and not held():
            raise StepTakenOver("A newer attempt holds this unit's owner.")
        row = _locked_or_created(unit, label, db, now)
        # A unit left compensating still owes undos, whatever its owner's
        # age: it is joined as given up, and its next give_up continues them.
        # The unit's steps on its own database: a related manager reads where
        # the router sends reads (a replica, behind the primary), and a retry
        # would find no recovery point and call out again.
        steps = StepRecord.objects.using(db).filter(unit=row)
        if fresh and row.attempt and row.state != UnitState.COMPENSATING:
            steps.delete()
            row.state, row.reason, row.error, row.created_at = (
                UnitState.RUNNING,
                "",
                "",
                now,
            )
        if row.state not in GIVEN_UP:
            # A given-up unit keeps its compensator's attempt: nothing new runs.
            row.state = UnitState.RUNNING
            row.attempt += 1
            row.lease_expires_at = now + lease
        row.label, row.updated_at = label[:255], now
        # On the unit's database: save() alone asks the router, which may
        # send it elsewhere than the owner's using=.
        row.save(using=db)
        results = dict(
            steps.exclude(state=StepState.FAILED).values_list("name", "result")
        )
    return Steps(unit, row, lease=lease, using=db, results=results, renew=renew)


def _inserted(unit: Unit, label: str, db: str, now, lease) -> UnitRecord | None:
    """Insert the unit's row at attempt 1; None if it exists already."""
    row = UnitRecord(
        id=unit.identity,
        kind=unit.kind,
        label=label[:255],
        intent=unit.intent,
        attempt=1,
        lease_expires_at=now + lease,
        created_at=now,
        updated_at=now,
    )
    connection = connections[db]
    fields = tuple(field.name for field in UnitRecord._meta.concrete_fields)
    insert = insert_shape(UnitRecord, connection, fields)
    values = {name: getattr(row, name) for name in fields}
    with connection.cursor() as cursor:
        cursor.execute(
            f"{insert.sql} ON CONFLICT DO NOTHING RETURNING 1",
            insert.params(values, connection),
        )
        return row if cursor.fetchone() is not None else None


def _locked_or_created(unit: Unit, label: str, db: str, now) -> UnitRecord:
    units = UnitRecord.objects.using(db)
    for _round in range(3):
        row = units.select_for_update().filter(pk=unit.identity).first()
        if row is not None:
            return row
        row = UnitRecord(
            id=unit.identity,
            kind=unit.kind,
            label=label[:255],
            intent=unit.intent,
            created_at=now,
            updated_at=now,
        )
        try:
            with transaction.atomic(using=db):
                row.save(using=db, force_insert=True)
            return row
        except IntegrityError:
            continue  # a concurrent begin() created it: lock that one
    raise StepTakenOver("Could not create or lock the unit's row.")


class Steps:
    """One attempt's hold on a unit: run its steps, finish or give it up."""

    def __init__(self, unit, row, *, lease, using, results, renew):
        self.unit = unit
        self.using = using
        self.lease = lease
        self.attempt = row.attempt
        self.state = row.state
        self.reason = row.reason
        self._results: dict[str, Any] = results
        # Stored by an atomic step inside the caller's transaction: its
        # recovery point commits or rolls back with that transaction, which
        # may be after the step returned. Checked against its row until seen
        # committed.
        self._uncommitted: set[str] = set()
        self._renew = renew
        self._renewed_at = clock.now()
        # Steps on worker threads renew one at a time: an owner fenced on
        # the exact lease it set (an inbox row, a receipt) would take a
        # sibling's renewal, read mid-way, for another worker's takeover.
        self._renewing = threading.Lock()

    def __repr__(self):
        return f"<Steps {self.unit.kind} {self.unit.identity[:12]} #{self.attempt}>"

    def done(self, name: str) -> bool:
        """Whether step ``name`` has its recovery point."""
        if name not in self._uncommitted:
            return name in self._results
        if not self._stored(name):
            # Rolled back with the caller's transaction: the step runs again.
            self._uncommitted.discard(name)
            del self._results[name]
            return False
        if not connections[self.using].in_atomic_block:
            self._uncommitted.discard(name)  # the caller's transaction committed
        return True

    def _stored(self, name: str) -> bool:
        return (
            StepRecord.objects.using(self.using)
            .filter(unit_id=self.unit.identity, name=name, state=StepState.DONE)
            .exists()
        )

    @property
    def given_up(self) -> bool:
        """Whether the unit was given up (before or during this attempt): its
        owner then finishes it abandoned, continuing any undos it owes, even
        where its code called no step to raise ``Abandon``."""
        return self.state in GIVEN_UP

    @property
    def progressed(self) -> bool:
        """Whether any step of the unit has its recovery point (this attempt's
        or an earlier one's)."""
        return any(self.done(name) for name in list(self._results))

    def step(
        self,
        name: str,
        fn: Callable[[str], Any],
        *,
        atomic: bool = False,
        undo: Callable[[str, Any], Any] | None = None,
    ) -> Any:
        """Run ``fn(derive(name))`` once for this unit; return its JSON result.

        The stored result comes back without calling ``fn`` when an earlier
        attempt reached the recovery point. ``atomic=True``: ``fn`` does local
        database work, committed with its recovery point in one transaction
        (exactly once). ``undo(key, result)``, a module-level function,
        compensates the step if the unit gives up. Refused before the call
        (``StepTakenOver``) once this handle finished the unit.
        """
        _check_name(name, undo=undo is not None)
        undo_path = undo_path_of(undo) if undo is not None else ""
        if self.state in GIVEN_UP:
            raise Abandon(self.reason)
        if self.state == UnitState.DONE:
            # Called from a thread that outlived its owner's block: no
            # attempt would store its recovery point, so make no call.
            raise StepTakenOver(f"This unit finished; step {name!r} was not run.")
        if self.done(name):
            return self._results[name]
        connection = connections[self.using]
        nested = connection.in_atomic_block
        if not atomic and connection.in_atomic_block:
            raise StepInTransaction(
                f"Step {name!r} runs inside an open transaction: a rollback would "
                "erase its recovery point while its outside effect stays. Run it "
                "outside transaction.atomic(), or pass atomic=True for local "
                "database work."
            )
        fn = tracing.stepped(fn, name, self.unit.kind, self.attempt)
        key = self.unit.derive(name)
        try:
            # The step is its unit's work wherever it is called from (a
            # worker thread, where the caller's current unit does not
            # follow): what fn records names the unit's intent.
            with running(self.unit):
                if atomic:
                    with transaction.atomic(using=self.using):
                        result = as_json(fn(key), name)
                        self._store(name, result, undo_path)
                else:
                    result = as_json(fn(key), name)
                    self._store(name, result, undo_path)
        except StepTakenOver:
            raise
        except Exception as exc:
            if not connection.in_atomic_block:
                self._note_failure(name, exc)
            raise
        self._results[name] = result
        if nested:
            self._uncommitted.add(name)
        self._renew_owner()
        return result

    def _store(self, name: str, result, undo_path: str) -> None:
        """The recovery point, fenced: only the attempt holding the unit stores."""
        stored = store_point(
            self.using, **self._recovery_point(name, result, undo_path)
        )
        if not stored:
            raise StepTakenOver(
                f"A newer attempt holds this unit; step {name!r} was not stored."
            )
        announce_step(
            self.unit.kind,
            self.unit.identity,
            self.unit.intent,
            name,
            self.attempt,
            undo=False,
            using=self.using,
        )

    def _recovery_point(self, name: str, result, undo_path: str = "") -> dict[str, Any]:
        """What step ``name``'s recovery point stores now (``store_point``'s
        arguments), renewing the lease this attempt holds."""
        now = clock.now()
        return {
            "unit": self.unit.identity,
            "attempt": self.attempt,
            "state": UnitState.RUNNING,
            "lease_until": now + self.lease,
            "now": now,
            "name": name,
            "result": result,
            "undo": undo_path,
            "undo_key": self.unit.derive(UNDO_PREFIX + name) if undo_path else "",
        }

    def _note_failure(self, name: str, exc: Exception) -> None:
        """Count the failed call on the step's row, for the console; never
        mask the error."""
        now = clock.now()
        table = _quoted(StepRecord, self.using)
        try:
            with transaction.atomic(using=self.using):
                insert_or_update(
                    StepRecord.objects.using(self.using),
                    {
                        "unit": self.unit.identity,
                        "name": name,
                        "state": StepState.FAILED,
                        "attempt": self.attempt,
                        "error": error_text(exc),
                        "created_at": now,
                    },
                    unique=("unit", "name"),
                    update=(
                        f"error = excluded.error, attempt = excluded.attempt, "
                        f"attempts = {table}.attempts + 1 WHERE {table}.state = %s"
                    ),
                    params=(StepState.FAILED,),
                )
        except DatabaseError:
            logger.warning("Could not note the failure of step %r", name, exc_info=True)

    def _renew_owner(self) -> None:
        if self._renew is None:
            return
        if connections[self.using].in_atomic_block:
            # An atomic step in the caller's transaction: renewed there, the
            # lease would roll back with it while the owner's fence (the
            # lease it set) and this handle believed it renewed.
            transaction.on_commit(self._renew_owner, using=self.using)
            return
        with self._renewing:
            now = clock.now()
            if now - self._renewed_at >= self.lease / 2:
                self._renew(now + self.lease)
                self._renewed_at = now

    def finish(self) -> None:
        """Mark the unit done (inside the owner's completing transaction, so
        both commit together). Refused if a newer attempt holds it.

        A unit given up is at its end already: nothing to mark."""
        if self.state in GIVEN_UP:
            return
        finished = fenced(
            self.using, self.unit.identity, self.attempt, UnitState.RUNNING
        ).update(state=UnitState.DONE, lease_expires_at=None, updated_at=clock.now())
        if not finished:
            raise StepTakenOver("A newer attempt holds this unit; it was not finished.")
        self.state = UnitState.DONE

    def withdraw(self) -> None:
        """Delete the unit, its owner having withdrawn the claim that began
        it (a request refused as invalid before any step): left running, it
        would be stuck mid-steps for ever, and never purged. Fenced: a newer
        attempt that joined it keeps it."""
        fenced(self.using, self.unit.identity, self.attempt, UnitState.RUNNING).delete()

    def give_up(self, reason: str) -> None:
        """Compensate the completed steps (see ``compensate``) and stop.

        The owner's lease is renewed first (its ``renew`` raises when it is no
        longer this attempt's): a newer attempt that took the owner over
        (a retry's claim, a redelivery) and has yet to join the unit resumes
        it, and its steps must not be undone under it."""
        from .compensation import compensate_owned

        if self._renew is not None:
            with self._renewing:
                now = clock.now()
                self._renew(now + self.lease)
                self._renewed_at = now
        compensate_owned(
            self.unit.identity,
            reason,
            using=self.using,
            lease=self.lease,
            attempt=self.attempt,
        )
        self.state, self.reason = UnitState.COMPENSATED, reason


def announce_step(
    kind: str, identity: str, intent: str, name: str, attempt: int, *, undo: bool, using
) -> None:
    """step_done, once the recovery point (a step's or an undo's) commits."""
    if not report.heard(signals.step_done, logging.DEBUG):
        return  # every step passes here: build nothing for nobody
    report(
        signals.step_done,
        logging.DEBUG,
        "Step %(step)r of %(kind)s unit %(unit).12s stored (attempt %(attempt)s)",
        using=using,
        kind=kind,
        unit=identity,
        intent=intent,
        step=name,
        attempt=attempt,
        undo=undo,
    )


def fenced(using, unit, attempt, state):
    """The unit's row while ``attempt`` holds it in ``state``: what each of
    the attempt's writes to it is fenced on. The state is compared as an
    expression no index serves (as the recovery point's is, ``_point``):
    the row is reached through its identity whatever the statistics say."""
    return (
        UnitRecord.objects.using(using)
        .alias(fenced_state=Concat("state", Value("")))
        .filter(pk=unit, attempt=attempt, fenced_state=state)
    )


def store_point(using, *, unit, attempt, state, lease_until, now, **step) -> bool:
    """Store a done step (``name``, ``result``, ``undo``, ``undo_key``) if the
    unit is still in ``state`` at ``attempt``, renewing its lease; False if
    not (fenced out). The failed row of earlier calls becomes done, under
    a new id (``_next_id``).

    On PostgreSQL one statement, so one round trip: the fenced UPDATE locks
    the unit's row in a CTE and the INSERT happens only if it matched. A
    newer attempt joining the unit waits on that lock, then sees the step.
    """
    connection = connections[using]
    if connection.vendor != "postgresql":  # SQLite: no UPDATE in a CTE
        with transaction.atomic(using=using):
            held = fenced(using, unit, attempt, state).update(
                lease_expires_at=lease_until, updated_at=now
            )
            if held:
                insert_or_update(
                    StepRecord.objects.using(using),
                    {
                        "unit": unit,
                        "state": StepState.DONE,
                        "attempt": attempt,
                        "created_at": now,
                        "finished_at": now,
                        **step,
                    },
                    unique=("unit", "name"),
                    update=_done(using),
                )
        return bool(held)
    sql, params = point_statement(
        connection,
        unit=unit,
        attempt=attempt,
        state=state,
        lease_until=lease_until,
        now=now,
        **step,
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


def point_statement(
    connection, *, unit, attempt, state, lease_until, now, **step
) -> tuple[str, list]:
    """The recovery point's statement on PostgreSQL and its parameters (see
    ``store_point``); the steps' benchmark sends it alone, as its floor."""
    point = _points.get(connection.alias)
    if point is None:
        point = _points[connection.alias] = _point(connection.alias)
    stamp = _LEASE.get_db_prep_save
    # Through their fields, these values cost a step more Python calls than
    # running its statement: the callers' strings and ints go as given (the
    # ORM's INSERT would leave them so), the times as the lease's field
    # prepares them, the result through its JSON field.
    given = {
        **point.defaults,
        **step,
        "state": StepState.DONE,
        "result": _RESULT.get_db_prep_save(step["result"], connection),
    }
    params = [stamp(lease_until, connection), stamp(now, connection)]
    params += [unit, attempt, state]
    params += [given[name] for name in point.carried]
    return point.sql, params


_LEASE = UnitRecord._meta.get_field("lease_expires_at")
_RESULT = StepRecord._meta.get_field("result")
# What the step's row takes from the unit's row its UPDATE returns, rather
# than from parameters: the same values, sent once.
_FROM_UNIT = {
    "unit": "held.id",
    "attempt": "held.attempt",
    "created_at": "held.updated_at",
    "finished_at": "held.updated_at",
}


class _Point(NamedTuple):
    sql: str
    # The step row's other fields, in column order.
    carried: tuple[str, ...]
    # Their defaults prepared for the database: the values a step gives none of.
    defaults: dict[str, Any]


# The recovery point's statement by database, built once (as the INSERTs'
# shapes are, ..inserts): every step stores one.
_points: dict[str, _Point] = {}


def _point(using) -> _Point:
    """The recovery point's statement on PostgreSQL (see store_point)."""
    connection = connections[using]
    insert = insert_shape(StepRecord, connection)
    select = ", ".join(_FROM_UNIT.get(field.name, "%s") for field in insert.fields)
    # state || '': no index serves the state here, so the unit is reached
    # through its identity whatever the statistics say. The state index
    # looked cheaper while they had not seen the units running yet (after a
    # burst, until the next ANALYZE), and each step walked all of them.
    # (``fenced`` is the ORM's form of the same fence.)
    sql = (
        f"WITH held AS (UPDATE {_quoted(UnitRecord, using)} "
        "SET lease_expires_at = %s, updated_at = %s "
        "WHERE id = %s AND attempt = %s AND state || '' = %s "
        "RETURNING id, attempt, updated_at) "
        f"INSERT INTO {insert.table} ({insert.columns}) "
        f"SELECT {select} FROM held "
        f"ON CONFLICT ({insert.conflict_target(connection, ('unit', 'name'))}) "
        f"DO UPDATE SET {_done(using)} RETURNING 1"
    )
    defaults = {
        field.name: default
        for field, default in zip(insert.fields, insert.prepared_defaults, strict=True)
        if field.name not in _FROM_UNIT
    }
    return _Point(sql, tuple(defaults), defaults)


def _done(using) -> str:
    """What a failed row becoming done gets (``DO UPDATE SET``)."""
    connection = connections[using]
    table = _quoted(StepRecord, using)
    return (
        f"{_next_id(table, connection)}, "
        "state = excluded.state, attempt = excluded.attempt, "
        "result = excluded.result, undo = excluded.undo, "
        "undo_key = excluded.undo_key, error = '', "
        f"attempts = {table}.attempts + 1, finished_at = excluded.finished_at"
    )


def _next_id(table: str, connection) -> str:
    """The assignment that gives a failed row becoming done a new id, as an
    insert would: ids then follow the order the recovery points were stored
    in (each under the unit's lock), which the undos run back along. A clock
    cannot tell that order, frozen or coarse, or behind on another host."""
    pk = connection.ops.quote_name(StepRecord._meta.pk.column)
    if connection.vendor == "postgresql":
        return f"{pk} = DEFAULT"  # the column's sequence (identity or serial)
    # SQLite writes one at a time; AUTOINCREMENT never hands out a lower id.
    return f"{pk} = (SELECT MAX({pk}) + 1 FROM {table})"


def _quoted(model, using) -> str:
    return connections[using].ops.quote_name(model._meta.db_table)


def _check_name(name, *, undo: bool = False) -> None:
    max_length = StepRecord._meta.get_field("name").max_length or 0
    if not isinstance(name, str) or not name or len(name) > max_length:
        raise StepError(
            f"A step's name is a non-empty string of at most {max_length} "
            f"characters, not {name!r}."
        )
    if undo and len(UNDO_PREFIX + name) > max_length:
        # Its undo is stored as a step named "undo:<name>": a longer name
        # could never be stored, and the unit never compensated.
        raise StepError(
            f"A step with an undo has a name of at most "
            f"{max_length - len(UNDO_PREFIX)} characters, not {len(name)}."
        )
    if name.startswith(UNDO_PREFIX) or "\x00" in name or SEPARATOR in name:
        raise StepError(
            f"Step {name!r}: names starting with {UNDO_PREFIX!r} are the "
            "compensations' own, a NUL cannot be stored, and the unit "
            "separator (\\x1f) would derive another unit's key."
        )
    try:
        # Neither the step's row nor derive()'s hash can encode it.
        storable.check_text(name, f"Step {name!r}")
    except ValueError as exc:
        raise StepError(f"{exc}.") from None


def as_json(value, name: str):
    """``value`` as it will come back from the recovery point (tuples become
    lists, objects' keys in jsonb's order, floats jsonb prints as integers
    ints), refused unless PostgreSQL's jsonb can store it: the attempt that
    called sees what a retry reads."""
    try:
        return storable.jsonb(value)
    except (TypeError, ValueError) as exc:
        raise StepResultNotJSON(
            f"Step {name!r} returned {type(value).__name__!s}: {exc}. Return "
            "JSON (dict, list, str, int, float, bool or None): it is stored "
            "as the step's recovery point."
        ) from exc


def undo_path_of(undo) -> str:
    """The dotted path that finds ``undo`` again in another process."""
    module = getattr(undo, "__module__", None)
    qualname = getattr(undo, "__qualname__", "")
    path = f"{module}.{qualname}"
    try:
        found = (
            import_string(path)
            if module and module != "__main__" and qualname.isidentifier()
            else None
        )
    except ImportError:
        found = None
    if found is not undo:
        raise UndoNotImportable(
            f"undo={undo!r}: pass a function defined at the top level of a "
            "module (not a lambda, a closure, a method or a partial), so a "
            "retry, another worker or an operator in the console can run it "
            "by its dotted path."
        )
    limit = StepRecord._meta.get_field("undo").max_length or 0
    if len(path) > limit:
        # Its step's recovery point could never be stored (after the call).
        raise StepError(
            f"undo={undo!r}: its dotted path has {len(path)} characters, where "
            f"at most {limit} are kept."
        )
    return path


def error_text(exc: BaseException) -> str:
    # A call's message may hold what a text column refuses (a NUL).
    return storable.text(f"{type(exc).__name__}: {exc}"[:MAX_ERROR])
