"""Process one receipt at most once: lock, run its handlers, mark it."""

import logging
import traceback
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum
from itertools import chain, zip_longest

from django.core.exceptions import ImproperlyConfigured
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    router,
    transaction,
)
from django.db.models import F

from idempotency.shared import clock, isolation, storable, tracing, units
from idempotency.shared.steps import Abandon, StepTakenOver, begin

from . import signals
from .conf import webhooks_settings
from .exceptions import HandlerFailed, ReceiptUnreadable, WorkerDied
from .handlers import (
    LOOKED_FOR,
    Event,
    describe_stray,
    handlers_for,
    run,
    runs_steps,
    stray,
    unhandled,
)
from .models import WebhookReceipt

logger = logging.getLogger("webhooks")
State = WebhookReceipt.State
# The sources this process reported as having no handler: once each, since a
# worker (gunicorn, Celery) runs no system checks to say it.
_unhandled_reported: set[str] = set()
# The stored traceback is for operators; the tail holds the useful part.
MAX_ERROR_LENGTH = 4000


class Outcome(StrEnum):
    """What ``process()`` found or did."""

    # The receipt is (now, or already) processed: its handlers committed.
    PROCESSED = State.PROCESSED
    # No handler is registered for its event; it is marked skipped.
    SKIPPED = State.SKIPPED
    # Another worker holds it right now; it runs there.
    BUSY = "busy"
    # It is gone (purged).
    MISSING = "missing"
    # Another worker runs its handlers under a live lease, or its worker died
    # and the lease has not lapsed yet; the task comes back after it.
    LEASED = "leased"


def process(
    receipt_id: int, *, failures: int = 0, last_attempt: bool = False
) -> Outcome:
    """Run the handlers of one receipt unless it is finished; say what happened.

    ``failures``: its runs that raised before this one (a ``process_receipt``
    task's retries); with its workers' deaths, they use up its runs. Raises
    ``HandlerFailed``, ``ReceiptUnreadable`` or ``WorkerDied`` after
    recording the failure. Steps handlers that fail on the last attempt (the
    last of its runs, or ``last_attempt``) give their unit up first: the
    undos of its completed steps run. A worker whose lease lapsed and was
    taken over writes nothing more: ``LEASED``.
    """
    receipts = _receipts()
    locked = False
    # The receipt, once its run is counted and leased to this worker.
    leased: WebhookReceipt | None = None
    # The state its handlers ran from, in the transaction that rolled back.
    taken_from = None
    try:
        # A short transaction of its own: the run is on record before its
        # handlers start, whatever becomes of the worker.
        with transaction.atomic(using=receipts.db):
            # SKIP LOCKED: a second worker on the same receipt leaves at once
            # instead of holding a connection until the first commits (then
            # the state check below would send it away).
            if receipts.lock_for_processing(receipt_id).first() is None:
                gone = not receipts.filter(pk=receipt_id).exists()
                return Outcome.MISSING if gone else Outcome.BUSY
            locked = True
            receipt = _read(receipts, receipt_id)
            if receipt.state in WebhookReceipt.FINISHED:
                return Outcome(receipt.state)
            taken_from = receipt.state
            if not _start(receipt):
                return _held(receipt)
        leased = receipt
        last_attempt = last_attempt or _last_run(receipt, failures)
        return _run(receipts, receipt, failures=failures, last_attempt=last_attempt)
    except Exception as exc:
        if not locked and isolation.is_serialization_failure(exc):
            # REPEATABLE READ or SERIALIZABLE: another worker finished it
            # after this transaction's snapshot. A new one sees that.
            return process(receipt_id, failures=failures, last_attempt=last_attempt)
        _fail(
            receipts,
            receipt_id,
            exc,
            leased,
            taken_from=taken_from,
            last_attempt=last_attempt,
        )
        return Outcome.LEASED  # not recorded: a newer worker holds the lease


def process_next(source: str | None = None) -> int | None:
    """Process the oldest received receipt no other worker holds (of
    ``source``, when given, and not one whose last run killed its worker);
    return its id, or None when there is none.

    Raises ``HandlerFailed`` or ``ReceiptUnreadable`` after recording the
    failure.
    """
    receipts = _receipts()
    taken = None
    leased: WebhookReceipt | None = None
    last_attempt = False
    try:
        # As in process(): the run is on record before its handlers start.
        with transaction.atomic(using=receipts.db):
            taken = _next_received(receipts, source)
            if taken is None:
                return None
            receipt = _read(receipts, taken)
            _start(receipt)  # next_received() left it free
        leased = receipt
        # A received receipt has no run that raised behind it (a failed one
        # is the retries'), as a process_receipt task's first run.
        last_attempt = _last_run(receipt, failures=0)
        _run(receipts, receipt, failures=0, last_attempt=last_attempt)
        return taken
    except Exception as exc:
        if taken is None:
            raise  # taking a receipt failed (the database), not a receipt
        _fail(
            receipts,
            taken,
            exc,
            leased,
            taken_from=WebhookReceipt.State.RECEIVED,
            last_attempt=last_attempt,
        )
        return taken  # not recorded: a newer worker holds the lease


def drain(limit: int, retry: Callable[[int], None]) -> int:
    """Process received receipts until none is left or ``limit`` ran; return
    how many ran. The configured sources take turns, each with its oldest
    receipt, so one provider's backlog holds no other's back; a source with
    none free leaves the turns. Then the rest run, oldest first: receipts
    of sources no longer configured, and last those whose worker died.
    ``retry(receipt_id)`` schedules a receipt whose handlers failed (it is
    ``failed`` now, so this drain and the next leave it alone)."""
    turns = deque(webhooks_settings.SOURCES)
    ran = 0
    while ran < limit:
        source = turns[0] if turns else None
        try:
            if process_next(source) is None:
                if source is None:
                    break
                turns.popleft()
                continue
        except HandlerFailed as exc:
            if not exc.last_attempt:
                retry(exc.receipt_id)
        except (ReceiptUnreadable, WorkerDied):
            pass  # marked failed with the reason; the others still run
        except OperationalError as exc:
            # REPEATABLE READ or SERIALIZABLE: another drain took the receipt
            # after this one's snapshot (idempotency.shared.isolation).
            if not isolation.is_serialization_failure(exc):
                raise
            continue
        turns.rotate(-1)
        ran += 1
    return ran


def _receipts():
    return WebhookReceipt.objects.db_manager(router.db_for_write(WebhookReceipt))


def _next_received(receipts, source=None):
    """The id of the oldest received receipt no other worker holds, locked.

    ``source``: its oldest whose last run did not kill its worker (left no
    lease behind), or None. Without: one of any source, such a receipt only
    when no other is left, so a receipt that kills every drain it is in
    keeps none of the others waiting. SKIP LOCKED: concurrent drains each
    take the next receipt no other holds, so none waits and none runs one
    twice."""
    free = receipts.next_received(clock.now())
    if source is not None:
        return free.filter(source=source, locked_until=None).first()
    taken = free.filter(locked_until=None).first()
    return taken if taken is not None else free.first()


def _runs_steps(receipt) -> bool:
    return runs_steps(handlers_for(receipt.source, receipt.event_type))


def _read(receipts, pk) -> WebhookReceipt:
    """Load a receipt this worker locked; raise ``ReceiptUnreadable`` when
    one of its stored values cannot be read (the row's fault, not the
    database's: a lost connection is raised as it is)."""
    try:
        return receipts.get(pk=pk)
    except (OperationalError, InterfaceError):
        raise
    except Exception as exc:
        raise ReceiptUnreadable(pk, f"receipt {pk} cannot be read: {exc!r}") from exc


def _refuse_skipping(receipt) -> None:
    """A handler registered for this event type under a source no setting
    configures (a typo, a renamed source) was most likely meant for it:
    fail the receipt, kept for a replay, rather than skip it unhandled."""
    strays = [
        describe_stray(key, found)
        for key, found in stray(webhooks_settings.SOURCES).items()
        if key[1] == receipt.event_type
    ]
    if strays:
        raise ImproperlyConfigured(
            f"{'; '.join(strays)}: no handler of {receipt.source!r} takes "
            f"{receipt.event_type!r}, so this delivery is failed, not skipped. "
            "Register the handler under the source's configured name."
        )


def _report_unhandled(source) -> None:
    """Warn, once per process, of a source no handler is registered for:
    its handlers are most likely in a module nothing imports."""
    # This source only: a handled source's skipped event types pass here on
    # every delivery.
    if source in _unhandled_reported or not unhandled([source]):
        return
    _unhandled_reported.add(source)
    logger.warning(
        "No handler is registered for source %r: every delivery of it is "
        "skipped. Handlers are looked for in %s.",
        source,
        LOOKED_FOR,
        extra={"source": source},
    )


def _run_handlers(receipt) -> Outcome:
    """Run the receipt's handlers and mark it, in the caller's transaction."""
    with tracing.webhook(
        "process",
        receipt.source,
        **{"messaging.message.id": receipt.delivery_id},
    ):
        return _handle(receipt)


def _handle(receipt) -> Outcome:
    handlers = handlers_for(receipt.source, receipt.event_type)
    if not handlers:
        _refuse_skipping(receipt)
        _report_unhandled(receipt.source)
    event = _event(receipt)
    for handler in handlers:
        with units.running(event.unit):
            run(handler, event)
    return _finish(receipt, State.PROCESSED if handlers else State.SKIPPED)


def _finish(receipt, state, last_error="") -> Outcome:
    """Mark a plain receipt finished, in the transaction holding its lock."""
    receipt.state = state
    receipt.attempts += 1
    receipt.last_error = last_error
    receipt.processed_at = clock.now()
    receipt.locked_until = None
    receipt.worker_deaths = 0
    receipt.save(
        update_fields=[
            "state",
            "attempts",
            "last_error",
            "processed_at",
            "locked_until",
            "worker_deaths",
        ]
    )
    signals.processed(receipt, using=receipt._state.db)
    return Outcome(receipt.state)


def _start(receipt) -> bool:
    """Lease a locked receipt to this worker's run, in the caller's
    transaction, which commits before the handlers start; False while
    another worker's lease is live.

    A worker killed mid-handler (out of memory, a hard time limit) rolls
    back all but this: a lease still set once it has lapsed is a run whose
    worker died. When those deaths used the receipt's runs up, this run is
    leased all the same: ``_run`` gives the receipt up instead of killing
    one more worker, and holds it meanwhile.
    """
    now = clock.now()
    if receipt.locked_until is not None:
        if receipt.locked_until > now:
            return False
        receipt.worker_deaths += 1
    receipt.locked_until = now + _lease(receipt)
    receipt.save(update_fields=["locked_until", "worker_deaths"])
    return True


def _held(receipt) -> Outcome:
    """What a worker finding another's live lease answers. Plain handlers:
    that worker is about to lock the row, or died and the receipt waits out
    its backoff; a received receipt is then the drains' (and
    enqueue_waiting's) to take, as when its row was locked. Steps handlers,
    and a failed receipt's retry, come back after the lease: nothing else
    would."""
    plain = not _runs_steps(receipt)
    if plain and receipt.state == State.RECEIVED:
        return Outcome.BUSY
    return Outcome.LEASED


def _lease(receipt) -> timedelta:
    if _runs_steps(receipt):
        return webhooks_settings.STEPS_LEASE  # each step's recovery point renews it
    # Plain handlers run under the row lock, which keeps other workers off;
    # the lease covers the moment before it is taken (and, renewed, the one
    # after a raise: _renew) and, once their worker died, spaces the
    # receipt's runs: 1 s, doubling up to the retries' cap.
    # From the run's start: one that outlived it before its worker died was
    # spaced from the one before by its own length, and MAX_RETRIES still
    # bounds how many there are.
    backoff = min(webhooks_settings.RETRY_BACKOFF_MAX, 2**receipt.worker_deaths)
    return timedelta(seconds=backoff)


def _run(receipts, receipt, *, failures: int, last_attempt: bool) -> Outcome:
    """Run the handlers of a receipt ``_start`` leased to this worker.

    Raises ``WorkerDied`` instead when its workers' deaths used its runs up,
    after giving its steps' unit up.
    """
    died = _too_many_deaths(receipt, failures)
    if _runs_steps(receipt):
        # Outside any transaction: each step commits its own recovery point.
        return _run_steps(receipts, receipt, last_attempt=last_attempt, died=died)
    if died is not None:
        raise died
    # The handlers' writes and the "processed" mark commit as one.
    ran = False
    failure: Exception | None = None
    try:
        with transaction.atomic(using=receipts.db):
            if receipts.lock_leased(receipt.pk, receipt.locked_until).first() is None:
                return Outcome.LEASED  # it lapsed, and another worker took it over
            try:
                # A savepoint: a handler that raises rolls back its own writes
                # while this run keeps the row lock.
                with transaction.atomic(using=receipts.db):
                    outcome = _run_handlers(receipt)
                ran = True
            except Abandon as abandon:
                # Given up, as a steps handler's delivery is: nothing to undo
                # but the handlers' writes, rolled back; it is not run again.
                reason = storable.text(f"abandoned: {abandon.reason}")
                outcome = _finish(receipt, State.PROCESSED, reason)
                ran = True
            except Exception as exc:
                failure = exc
                _renew(receipts, receipt)
    except Exception:
        if ran and _marked(receipts, receipt):
            # A handler's on_commit hook raised after the commit (task.delay()
            # with the broker down); Django dropped the hooks queued after
            # it, delivery_processed among them.
            signals.processed(receipt, using=receipts.db)
        raise
    if failure is not None:
        raise failure
    return outcome


def _renew(receipts, receipt) -> None:
    """Lease again a plain receipt whose handler raised under its row lock,
    in that lock's transaction, for the moment until its failure is written.

    Its lease may have lapsed while the handler ran: left so, the lock would
    go with the rollback, and another worker would take the lapsed lease
    for a dead worker's (counting a death and running it again at once)
    and fence this run's failure out, with its error and its signal.
    """
    if transaction.get_rollback(using=receipts.db):
        return  # the transaction is lost (its connection, say): as before
    receipt.locked_until = clock.now() + _lease(receipt)
    receipts.filter(pk=receipt.pk).update(locked_until=receipt.locked_until)


def _marked(receipts, receipt) -> bool:
    """Whether this run's "processed" mark committed."""
    if transaction.get_connection(receipts.db).in_atomic_block:
        return False  # nothing commits inside a caller's transaction
    try:
        return receipts.filter(
            pk=receipt.pk,
            state=receipt.state,
            attempts=receipt.attempts,
            processed_at=receipt.processed_at,
        ).exists()
    except DatabaseError:
        return False  # cannot tell: the failure is recorded as before


def _runs_before(receipt, failures: int) -> int:
    """The receipt's runs before this one, since it was received (or
    reopened): those that raised and those that killed their worker. One
    budget: ``MAX_RETRIES`` retries after the first run, whichever way each
    ended."""
    return failures + receipt.worker_deaths


def _last_run(receipt, failures: int) -> bool:
    return _runs_before(receipt, failures) >= webhooks_settings.MAX_RETRIES


def _too_many_deaths(receipt, failures: int) -> WorkerDied | None:
    """``WorkerDied`` when the last of the receipt's runs killed its worker."""
    if _runs_before(receipt, failures) > webhooks_settings.MAX_RETRIES:
        return WorkerDied(receipt.pk, receipt.worker_deaths)
    return None


def _run_steps(receipts, receipt, *, last_attempt=False, died=None) -> Outcome:
    """Run steps handlers in no transaction, resuming at the first step with
    no recovery point; then mark the receipt processed with the unit's end.

    ``Abandon`` gives the unit up (its completed steps are undone, once
    each) and finishes the receipt: a retry will not run it again. So does
    a last attempt that fails, and ``died`` (its workers' deaths used its
    runs up) before any handler runs.
    """
    unit = _event(receipt).unit
    held = receipts.filter(pk=receipt.pk)

    def renew(until):
        # Fenced on the lease this worker set: once it lapsed and a newer
        # worker took the receipt, this one must not extend that one's.
        if not held.filter(locked_until=receipt.locked_until).update(
            locked_until=until
        ):
            raise StepTakenOver(f"Another worker took over receipt {receipt.pk}.")
        receipt.locked_until = until

    def still_held() -> bool:
        # A worker that stalled past its lease must not join the unit the
        # worker that took it over runs, or has finished. Locked until the
        # unit is joined: a retry cannot take the lease over, and join first,
        # between this answer and the join it allows.
        return (
            held.filter(locked_until=receipt.locked_until).select_for_update().exists()
        )

    handle = begin(
        unit,
        f"{receipt.source} {receipt.delivery_id}",
        lease=webhooks_settings.STEPS_LEASE,
        using=receipts.db,
        renew=renew,
        held=still_held,
    )
    if died is not None:
        handle.give_up(f"its attempts ran out: {died!r}")
        raise died
    event = _event(receipt, steps=handle)
    abandoned = ""
    try:
        with (
            tracing.webhook(
                "process",
                receipt.source,
                **{"messaging.message.id": receipt.delivery_id},
            ),
            units.running(unit),
        ):
            for handler in handlers_for(receipt.source, receipt.event_type):
                run(handler, event)
        if handle.given_up:
            raise Abandon(handle.reason)  # joined given up; no step raised it
    except StepTakenOver:
        raise  # a newer worker holds the unit: giving it up is not ours to do
    except Abandon as abandon:
        handle.give_up(abandon.reason)  # fenced on this worker's lease
        abandoned = storable.text(f"abandoned and compensated: {abandon.reason}")
    except Exception as exc:
        if last_attempt:
            handle.give_up(f"its attempts ran out: {exc!r}")
        raise
    # The unit's end and the "processed" mark commit together. The receipt
    # first, then the unit, as a retry's begin() locks them: the other order
    # could deadlock with it.
    with transaction.atomic(using=receipts.db):
        held.update(
            state=State.PROCESSED,
            attempts=F("attempts") + 1,
            last_error=abandoned,
            processed_at=clock.now(),
            locked_until=None,
            worker_deaths=0,
        )
        if not abandoned:
            handle.finish()
        receipt.state = State.PROCESSED
        signals.processed(receipt, using=receipts.db)
    return Outcome.PROCESSED


def _event(receipt, steps=None) -> Event:
    return Event(
        receipt=receipt,
        source=receipt.source,
        event_type=receipt.event_type,
        delivery_id=receipt.delivery_id,
        occurred_at=receipt.occurred_at,
        steps=steps,
    )


def _fail(
    receipts, receipt_id, exc, leased=None, *, taken_from=None, last_attempt=False
) -> None:
    """Mark the receipt failed with the traceback of ``exc``, then raise
    (``HandlerFailed`` says whether it was the ``last_attempt``).

    ``leased``: the receipt this worker's run leased. When a newer worker
    has taken over its lease since, nothing is written and this returns.
    ``taken_from``: the state the handlers ran from (see ``record_failure``).
    ``delivery_failed`` is sent only when the failure was recorded.
    """
    # A handler's message may hold what a text column refuses (a NUL).
    error = storable.text(traceback.format_exc()[-MAX_ERROR_LENGTH:])
    lease = leased.locked_until if leased is not None else None
    # A short transaction of its own: the failed one rolled back.
    # A receipt that killed its workers: each of those runs was an attempt.
    deaths = exc.deaths if isinstance(exc, WorkerDied) else 0
    recorded = receipts.record_failure(
        receipt_id, error, lease=lease, taken_from=taken_from, deaths=deaths
    )
    if not recorded and lease is not None and not receipts.release(receipt_id, lease):
        return
    # Reported only when recorded: a receipt finished or reopened by a
    # redelivery meanwhile did not fail, and the warning and the metric
    # would count a failure nobody can find.
    if recorded:
        identity = (
            receipts.filter(pk=receipt_id)
            .values("source", "delivery_id", "event_type", "attempts")
            .first()
        )
        signals.failed(receipt_id, exc, identity or {}, using=receipts.db)
    if isinstance(exc, ReceiptUnreadable | WorkerDied):
        raise exc
    raise HandlerFailed(
        receipt_id, f"receipt {receipt_id}: {exc!r}", last_attempt=last_attempt
    ) from exc


def enqueue_waiting(older_than: timedelta, enqueue: Callable, limit=1000) -> int:
    """Enqueue received receipts no worker took (a lost enqueue); say how many."""
    # Where writes go: a replica behind the primary still shows received the
    # receipts processed since, and each would be enqueued again.
    now = clock.now()
    waiting = _receipts().waiting(now - older_than, now)
    pks = _in_turns(waiting, limit)
    enqueued = 0
    for pk in pks:
        try:
            enqueue(pk)
        except Exception:
            # One receipt's enqueue (a source's route) must not keep the
            # others, newer, waiting: it is tried again on the next run.
            logger.warning(
                "Could not enqueue receipt %s",
                pk,
                exc_info=True,
                extra={"receipt_id": pk},
            )
            continue
        enqueued += 1
    return enqueued


def _in_turns(waiting, limit) -> list[int]:
    """The ids of up to ``limit`` of ``waiting``, the sources taking turns,
    each with its oldest (those of sources no longer configured as one), as
    in the drain: oldest first overall, a source whose enqueue keeps failing
    (a custom route) would fill every run with its own receipts. One indexed
    query per source, each reading at most ``limit`` rows."""
    configured = list(webhooks_settings.SOURCES)
    by_source = [waiting.filter(source=source) for source in configured]
    by_source.append(waiting.exclude(source__in=configured))
    oldest = [
        rows.order_by("received_at", "pk").values_list("pk", flat=True)[:limit]
        for rows in by_source
    ]
    turns = chain.from_iterable(zip_longest(*oldest))
    return [pk for pk in turns if pk is not None][:limit]
