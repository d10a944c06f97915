"""Compensations: when a unit gives up, undo its completed steps once each.

The undos run in the reverse order of their steps' recovery points, each
called as ``undo(key, result)`` with ``key = derive("undo:" + name)`` and
stored as a recovery point of its own (a step named ``undo:<name>``). The
unit's row is the lock: one worker compensates at a time under a lease, a
second abandon finds it compensating (or compensated) and does nothing, and
one that finds the lease lapsed continues from the first undo not stored.
"""

import logging
from datetime import timedelta

from django.db import OperationalError, connections, router, transaction
from django.utils.module_loading import import_string

from .. import clock, isolation, signals, storable, tracing, units
from ..stepnames import UNDO_PREFIX
from .exceptions import (
    CompensationFailed,
    CompensationInProgress,
    StepInTransaction,
    StepTakenOver,
    UnitFinished,
    UnitRunning,
)
from .handle import (
    announce_step,
    as_json,
    error_text,
    fenced,
    report,
    store_point,
)
from .models import StepRecord, UnitRecord

UnitState = UnitRecord.State
StepState = StepRecord.State
# How long a compensation holds the unit before another abandon may continue
# it; renewed by each undo's recovery point.
COMPENSATION_LEASE = timedelta(seconds=60)


def compensate(
    unit_identity: str,
    reason: str,
    *,
    using: str | None = None,
    lease: timedelta = COMPENSATION_LEASE,
    seen: int | None = None,
) -> bool:
    """Give up the unit ``unit_identity`` from outside it (an operator).

    Refused while the unit runs under a live lease (``UnitRunning``): its
    worker may be mid-call. Returns True when this call compensated it, False
    when it already was (or no such unit exists). ``seen``: the attempt the
    operator's page showed; a unit that moved on since (released, resumed)
    is left alone (False).
    """
    return _compensate(
        unit_identity, reason, using=using, lease=lease, attempt=None, seen=seen
    )


def compensate_owned(unit_identity, reason, *, using, lease, attempt) -> bool:
    """Give up the unit from the attempt that holds it (``Steps.give_up``)."""
    return _compensate(unit_identity, reason, using=using, lease=lease, attempt=attempt)


def _compensate(unit_identity, reason, *, using, lease, attempt, seen=None) -> bool:
    db = using or router.db_for_write(UnitRecord)
    if connections[db].in_atomic_block:
        raise StepInTransaction(
            "Compensating calls the undos outside any transaction: call it "
            "outside transaction.atomic()."
        )
    try:
        unit = _take(unit_identity, reason, db, lease, attempt, seen)
    except OperationalError as exc:
        if not isolation.is_serialization_failure(exc):
            raise
        # REPEATABLE READ or SERIALIZABLE: another compensation (or the
        # unit's worker) wrote the unit after this transaction's snapshot. A
        # new one sees what it did.
        unit = _take(unit_identity, reason, db, lease, attempt, seen)
    if unit is None:
        return False
    # The undos are the unit's work: an event one records names its intent,
    # also where an operator gives the unit up (its owner's worker runs them
    # with the unit current).
    with units.serving(unit.intent):
        for step in _to_undo(unit, db):
            _undo(unit, step, db, lease)
    _close(unit, db)
    return True


def _take(unit_identity, reason, db, lease, attempt, seen=None) -> UnitRecord | None:
    """Lock the unit and make it this compensation's (attempt + 1: the fence)."""
    now = clock.now()
    with transaction.atomic(using=db):
        unit = (
            UnitRecord.objects.using(db)
            .select_for_update()
            .filter(pk=unit_identity)
            .first()
        )
        if unit is None or unit.state == UnitState.COMPENSATED:
            return None
        if seen is not None and unit.attempt != seen:
            # Checked under the lock: a release or a resuming retry since the
            # operator's page raised the attempt, and that page is stale.
            return None
        if unit.state == UnitState.DONE:
            raise UnitFinished(f"{unit} finished: there is nothing to compensate.")
        live = unit.lease_expires_at is not None and unit.lease_expires_at > now
        if unit.state == UnitState.COMPENSATING and live:
            raise CompensationInProgress(f"{unit} is being compensated right now.")
        if (
            unit.state == UnitState.RUNNING
            and attempt is not None
            and unit.attempt != attempt
        ):
            # Fenced out, lease live or not: a newer attempt joined, or an
            # operator released the unit for the next retry to resume.
            raise StepTakenOver(f"A newer attempt holds {unit}.")
        if unit.state == UnitState.RUNNING and live and attempt is None:
            raise UnitRunning(
                f"{unit} is running and its lease is live until "
                f"{unit.lease_expires_at:%Y-%m-%d %H:%M:%S}: release or abandon "
                "it once its lease lapses."
            )
        unit.state = UnitState.COMPENSATING
        unit.attempt += 1
        unit.lease_expires_at = now + lease
        # The reason may hold what a text column refuses (a NUL from an
        # Abandon's message): kept escaped, or the unit could never give up.
        unit.reason = unit.reason or storable.text(str(reason))
        unit.error = ""
        unit.updated_at = now
        unit.save(using=db)  # not the router's: the caller's using= (begin())
    return unit


def _to_undo(unit, db) -> list[StepRecord]:
    """The completed steps with an undo, the last recovery point first.

    By id: a recovery point gets a new one when it is stored, under the unit's
    lock (``store_point``), so ids keep the order of completion, which no
    clock does (frozen, coarse, or behind on the host of a later attempt).
    Attempt first, for rows stored before that (a step that failed once
    kept the id of its first call): the fence still orders attempts."""
    return list(
        StepRecord.objects.using(db)
        .filter(unit=unit, state=StepState.DONE)
        .exclude(undo="")
        .order_by("-attempt", "-id")
    )


def _undo(unit, step, db, lease) -> None:
    name = UNDO_PREFIX + step.name
    try:
        undo = tracing.stepped(import_string(step.undo), name, unit.kind, unit.attempt)
        result = as_json(undo(step.undo_key, step.result), name)
    except Exception as exc:
        _stop(unit, db, exc)
        raise CompensationFailed(
            f"The undo of step {step.name!r} ({step.undo}) raised {error_text(exc)}. "
            "The unit stays compensating; abandon it again to continue."
        ) from exc
    now = clock.now()
    with transaction.atomic(using=db):
        stored = store_point(
            db,
            unit=unit.pk,
            attempt=unit.attempt,
            state=UnitState.COMPENSATING,
            lease_until=now + lease,
            now=now,
            name=name,
            result=result,
            undo="",
            undo_key="",
        )
        if not stored:
            _lost(unit)
        StepRecord.objects.using(db).filter(pk=step.pk).update(state=StepState.UNDONE)
        announce_step(
            unit.kind, unit.pk, unit.intent, name, unit.attempt, undo=True, using=db
        )


def _stop(unit, db, exc) -> None:
    """Leave the unit compensating with the error; the next abandon continues."""
    _fenced(unit, db).update(
        error=error_text(exc), lease_expires_at=None, updated_at=clock.now()
    )


def _close(unit, db) -> None:
    with transaction.atomic(using=db):
        closed = _fenced(unit, db).update(
            state=UnitState.COMPENSATED,
            lease_expires_at=None,
            error="",
            updated_at=clock.now(),
        )
        if not closed:
            _lost(unit)
        undone = [
            name.removeprefix(UNDO_PREFIX)
            for name in StepRecord.objects.using(db)
            .filter(unit=unit, name__startswith=UNDO_PREFIX)
            .order_by("attempt", "id")
            .values_list("name", flat=True)
        ]
        report(
            signals.unit_compensated,
            logging.WARNING,
            "%(kind)s unit %(unit).12s gave up and undid %(steps)s: %(reason)s",
            using=db,
            kind=unit.kind,
            unit=unit.pk,
            intent=unit.intent,
            steps=undone,
            reason=unit.reason,
        )


def _fenced(unit, db):
    return fenced(db, unit.pk, unit.attempt, UnitState.COMPENSATING)


def _lost(unit):
    raise StepTakenOver(f"Another worker took over the compensation of {unit}.")
