"""Apply each message once: ``receive()`` and the ``@consumer`` decorator."""

import functools
import hashlib
import json
import logging
import random
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from celery import Task, current_task, shared_task
from celery.exceptions import Ignore, Reject, Retry
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError, connections, router, transaction

from idempotency.shared import (
    callables,
    clock,
    databases,
    isolation,
    storable,
    tracing,
    units,
    workers,
)
from idempotency.shared.exceptions import ClaimRaced
from idempotency.shared.headers import (
    EVENT_HEADERS,
    INTENT_HEADER,
    INTENT_PATTERN,
    MESSAGE_ID_HEADER,
)
from idempotency.shared.steps import Abandon, StepInTransaction, StepTakenOver, begin

from . import signals
from .conf import inbox_settings
from .exceptions import (
    DeliveryBusy,
    DeliveryDied,
    InboxError,
    MessageIdInvalid,
    MessageIdMissing,
    StepsNotClaimed,
    SubscriberInvalid,
)
from .models import InboxMessage
from .querysets import BUSY

# Where a message id is looked up, in order: our outbox's header
# (MESSAGE_ID_HEADER), Debezium's event router header, then a CloudEvents
# attribute (binary mode header).
DEBEZIUM_HEADER = "id"
CLOUDEVENTS_HEADERS = ("ce_id", "ce-id")

logger = logging.getLogger("inbox")


@dataclass(frozen=True)
class Delivery(units.UnitHandle):
    subscriber: str
    message_id: str
    duplicate: bool
    # The intent the message carried ("" when none): the unit serves it.
    inherited_intent: str = ""
    # A steps consumer's steps (``receive_steps()``); None under ``receive()``,
    # whose one transaction leaves no room for a recovery point.
    steps: Any = field(default=None, compare=False, repr=False)

    @property
    def unit(self) -> units.Unit:
        return units.Unit(
            units.INBOX,
            (self.subscriber, self.message_id),
            inherited_intent=self.inherited_intent,
        )

    def steps_refused(self) -> Exception:
        return StepsNotClaimed(
            "delivery.step() needs a steps consumer: @consumer(..., "
            "steps=True) or receive_steps(); receive() runs the consumer in "
            "one transaction, where a step's recovery point cannot commit."
        )


@contextmanager
def receive(
    subscriber: str,
    message_id: str,
    *,
    intent: str | None = None,
    using: str | None = None,
) -> Iterator[Delivery]:
    """Open (or join) a transaction and claim ``message_id`` for ``subscriber``.

    Run the business mutation inside the block, unless ``delivery.duplicate``.
    An exception rolls back the mutation and the claim together, so the
    redelivery processes again. ``Abandon`` gives the delivery up, as in a
    steps consumer: the mutation rolls back, and the claim then commits on
    its own, so no redelivery runs it again (in a caller's transaction, it
    goes on to the caller, whose transaction rolls back). ``intent`` is the
    one the message carried (``intent_from(headers)``): the delivery serves
    it, and the block runs with the delivery as the current unit.
    """
    message_id, intent, using = _checked(
        "receive", subscriber, message_id, intent, using
    )
    owned = not connections[using].in_atomic_block
    while True:
        try:
            # savepoint=False: inside the caller's transaction this costs no
            # extra round trips, and a failure must roll the caller's work
            # back anyway.
            with transaction.atomic(using=using, savepoint=False):
                inserted = _claim(subscriber, message_id, using, retryable=owned)
                delivery = Delivery(subscriber, message_id, not inserted, intent)
                signals.delivered(delivery, using=using)
                with units.running(delivery.unit):
                    yield delivery
            return
        except ClaimRaced:
            continue  # a new transaction sees the winner's row: a duplicate
        except Abandon as abandon:
            if not owned:
                raise  # the caller's transaction rolls back: not ours to commit
            _give_up(subscriber, message_id, abandon.reason, using)
            return


def _give_up(subscriber, message_id, reason, using) -> None:
    """Claim a delivery whose consumer gave it up, its work rolled back."""
    while True:
        try:
            with transaction.atomic(using=using):
                _claim(subscriber, message_id, using, retryable=True)
                signals.abandoned(subscriber, message_id, reason, using=using)
            return
        except ClaimRaced:
            continue


def _claim(subscriber, message_id, using, *, retryable) -> bool:
    """Claim the message (True: this delivery applies it). ``retryable``: in
    a transaction of its own, where a claim that met a row committed after
    its snapshot can be taken again (``idempotency.shared.isolation``)."""
    try:
        return InboxMessage.objects.claim(
            subscriber, message_id, clock.now(), using=using
        )
    except OperationalError as exc:
        if retryable and isolation.is_serialization_failure(exc):
            raise ClaimRaced from exc
        raise


@contextmanager
def receive_steps(
    subscriber: str,
    message_id: str,
    *,
    intent: str | None = None,
    using: str | None = None,
    last_attempt: bool = False,
) -> Iterator[Delivery]:
    """Claim ``message_id`` for ``subscriber`` with a lease, committed before
    the consumer runs, so its steps (``delivery.step()``) each keep their own
    recovery point: a redelivery resumes at the first unfinished one.

    Runs outside any transaction. Unless ``delivery.duplicate``, run the
    steps inside the block; when it ends, the delivery is applied. The unit
    gives up (the undos of its completed steps run, once each, last first)
    when the block raises ``Abandon`` (the delivery is applied: it will not
    run again), or raises anything on the ``last_attempt`` (the error goes
    on, for the caller to record the message dead). Any other exception
    leaves the delivery running, for a retry to resume. Raises
    ``DeliveryBusy`` while another worker's lease on it is live, and
    ``StepTakenOver`` (writing nothing more) once a newer worker took over
    this one's lapsed lease, and ``DeliveryDied``, the unit given up without
    running the block, once runs that ended without an ack (counted by a
    ``ConsumerTask``'s redelivered copies) used up ``INBOX["MAX_ATTEMPTS"]``.
    ``intent`` as for ``receive()``.
    """
    message_id, intent, using = _checked(
        "receive_steps", subscriber, message_id, intent, using
    )
    if connections[using].in_atomic_block:
        raise StepInTransaction(
            "receive_steps() runs outside any transaction: its claim and each "
            "step's recovery point commit on their own."
        )
    lease = inbox_settings.STEPS_LEASE
    inbox = InboxMessage.objects
    now = clock.now()
    claimed, lost_runs = inbox.claim_running_counted(
        subscriber, message_id, now, lease, using=using
    )
    if claimed == BUSY:
        raise DeliveryBusy(
            f"Another worker holds {message_id} for {subscriber}.",
            retry_after=lease.total_seconds(),
        )
    if claimed != InboxMessage.State.RUNNING:
        duplicate = Delivery(subscriber, message_id, True, intent)
        signals.delivered(duplicate, using=using)
        yield duplicate
        return

    # The lease this worker holds: renewing and releasing are fenced on it.
    held = now + lease

    def renew(locked_until):
        nonlocal held
        if not inbox.renew(
            subscriber, message_id, locked_until, held=held, using=using
        ):
            raise StepTakenOver(f"Another worker took over {message_id}.")
        held = locked_until

    def still_held() -> bool:
        # A worker that stalled past its lease must not join the unit the
        # redelivery that took it over runs, or has finished.
        return inbox.holds(subscriber, message_id, held=held, using=using)

    delivery = Delivery(subscriber, message_id, False, intent)
    # The unit lives with its delivery: its end commits with "applied", and
    # an atomic step's transaction is the one the consumer's writes use.
    handle = begin(
        delivery.unit,
        f"{subscriber} {message_id}",
        lease=lease,
        using=using,
        renew=renew,
        held=still_held,
    )
    if lost_runs >= inbox_settings.MAX_ATTEMPTS:
        # Resumed, it would run the step that kills its worker (and call out)
        # again, every lease for ever: give it up without running it.
        died = DeliveryDied(
            f"{message_id} for {subscriber}: its worker died {lost_runs} "
            "time(s) before an ack"
        )
        handle.give_up(str(died))
        raise died
    try:
        with units.running(delivery.unit):
            yield replace(delivery, steps=handle)
        if handle.given_up:
            raise Abandon(handle.reason)  # joined given up; no step raised it
    except StepTakenOver:
        raise  # a newer worker holds the delivery: nothing here is ours to write
    except Abandon as abandon:
        handle.give_up(abandon.reason)  # fenced on this worker's lease
        if inbox.finish_running(subscriber, message_id, using=using):
            # Given up for good, as a receive() consumer's Abandon is.
            signals.abandoned(subscriber, message_id, abandon.reason, using=using)
        return
    except Exception as exc:
        if last_attempt:
            handle.give_up(f"its attempts ran out: {exc!r}")
        else:
            # This worker is done with it: its retry resumes at once.
            inbox.release(subscriber, message_id, held=held, using=using)
        raise
    # The unit's end and the delivery's "applied" commit together. The row
    # first, then the unit, as a redelivery's begin() locks them: the other
    # order could deadlock with it.
    with transaction.atomic(using=using):
        inbox.finish_running(subscriber, message_id, using=using)
        handle.finish()
        signals.delivered(delivery, using=using)


def _checked(call: str, subscriber, message_id, intent, using):
    """The arguments of ``receive()`` or ``receive_steps()`` (``call``),
    checked before any SQL: the message id and the intent as the inbox keeps
    them, and the database the claim goes to."""
    if not subscriber or not _given(message_id):
        raise MessageIdMissing(f"{call}() needs a subscriber and a message id.")
    checked_subscriber(subscriber)
    message_id = checked_message_id(message_id)
    intent = checked_intent(intent)
    using = using or router.db_for_write(InboxMessage)
    databases.refuse_unusable(using, ImproperlyConfigured)
    return message_id, intent, using


def checked_message_id(message_id) -> str:
    """``message_id`` as the inbox stores it, or MessageIdInvalid.

    Refused here, before any transaction: the database would refuse it in
    the middle of one (a DataError), after the consumer's work began.
    """
    message_id = _text(message_id)
    if not message_id.strip():
        # One blank id would name every message that carries it: each after
        # the first would be skipped as a duplicate.
        raise MessageIdInvalid("The message id is blank.")
    field = InboxMessage._meta.get_field("message_id")
    try:
        storable.check_column(message_id, field, "The message id")
    except ValueError as exc:
        raise MessageIdInvalid(f"{exc}.") from None
    return message_id


def checked_subscriber(subscriber) -> None:
    """Raise SubscriberInvalid unless the inbox can store ``subscriber``.

    As for a message id, before any SQL: a DataError would break the caller's
    transaction, and a ConsumerTask could not bury the message (it would be
    requeued for ever).
    """
    if not isinstance(subscriber, str):
        raise SubscriberInvalid(
            f"A subscriber is a name, not {type(subscriber).__name__}."
        )
    if units.SEPARATOR in subscriber:
        # Else ("a\x1fb", message "c") and ("a", message "b\x1fc") would be
        # one unit: the same recovery points and derived keys.
        raise SubscriberInvalid(
            f"A subscriber cannot hold the unit separator (\\x1f): {subscriber!r}."
        )
    field = InboxMessage._meta.get_field("subscriber")
    try:
        storable.check_column(subscriber, field, "The subscriber")
    except ValueError as exc:
        raise SubscriberInvalid(f"{exc}.") from None


def _given(value) -> bool:
    """Whether ``value`` is a message id: an id of 0 (a sequence's first) is
    one; None and empty text are not."""
    return value is not None and _text(value) != ""


def _text(value) -> str:
    """A message id as text. Bytes (a Kafka header's value, CloudEvents'
    ``ce_id`` among them) are decoded, not quoted: ``str(b"m1")`` is
    "b'm1'", another id than the same message's "m1" from a body. Bytes
    UTF-8 cannot decode become lone surrogates, which the inbox refuses.

    Any other type is refused: the text of a mapping, a list, a float or a
    bool is no one's id (another producer's "True" would be its duplicate),
    and an object's default text holds its address, another on each
    redelivery, so each would be applied again."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode(errors="surrogateescape")
    if isinstance(value, str | uuid.UUID):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return str(value)
        except ValueError:  # past the digits Python turns into text
            raise MessageIdInvalid(
                "The message id is an integer of more than 4,300 digits."
            ) from None
    raise MessageIdInvalid(
        "A message id is text, bytes, an integer or a UUID, "
        f"not {type(value).__name__}."
    )


def checked_intent(intent) -> str:
    """The intent a message carried, or "" when it carried none we can trust.

    Like a malformed ``traceparent``, one that is not a 64-digit hex digest is
    dropped, never refused: the delivery then starts an intent of its own,
    where a refusal would kill a message over metadata.
    """
    if not intent:
        return ""
    if isinstance(intent, bytes | bytearray):
        intent = _text(intent)  # a Kafka header's value, as for a message id
    if isinstance(intent, str) and INTENT_PATTERN.fullmatch(intent):
        return intent
    logger.warning("Dropped a malformed %s header: %.80r", INTENT_HEADER, intent)
    return ""


def intent_from(headers: Mapping | None = None) -> str | None:
    """Find the intent a delivery carries: our header, else the one inside the
    event's own headers (``once-headers``: Debezium's router sends only that
    one, as JSON text)."""
    found = _mapping(headers)
    if found.get(INTENT_HEADER):
        return found[INTENT_HEADER]
    event_headers = found.get(EVENT_HEADERS)
    if isinstance(event_headers, str | bytes):
        try:
            event_headers = json.loads(event_headers)
        except (ValueError, RecursionError):  # not JSON, or nested too deep
            return None
    if isinstance(event_headers, dict):
        return event_headers.get(INTENT_HEADER) or None
    return None


def message_id_from(headers: Mapping | None = None, body=None) -> str | None:
    """Find the message id of a delivery: our header, Debezium's, CloudEvents'.

    Raises MessageIdInvalid for one that is no id (a mapping, a float...)."""
    found = _mapping(headers)
    for name in (MESSAGE_ID_HEADER, DEBEZIUM_HEADER, *CLOUDEVENTS_HEADERS):
        if _given(found.get(name)):
            return _text(found[name])
    # A structured-mode CloudEvent carries its id in the body.
    if isinstance(body, dict) and "specversion" in body and _given(body.get("id")):
        return _text(body["id"])
    return None


def _mapping(headers: object) -> Mapping:
    # Anything but a mapping (a producer's text, say) carries no header we
    # can read: the delivery is found by what comes next.
    return headers if isinstance(headers, Mapping) else {}


def consumer(
    subscriber: str,
    *,
    message_id: str | Callable | None = None,
    intent: str | Callable | None = None,
    steps: bool = False,
) -> Callable[[Callable], Callable]:
    """Make a message handler apply each message once for ``subscriber``.

    Works on plain callables and under ``@shared_task(acks_late=True)``: the
    task acks only after the handler's transaction committed, and a redelivery
    then finds the id and is acked without running the handler again.

    ``message_id`` is a keyword argument name, a function of the handler's
    arguments, or None: then the ``headers`` keyword argument (see
    ``message_id_from``), the ``payload`` CloudEvent, a ``message_id`` keyword
    argument, the Celery task's headers and finally its task id. ``intent``
    is found the same way (``intent_from``: the ``headers`` keyword argument,
    then the task's headers). The handler runs with the delivery as the
    current unit (``idempotency.shared.units.current()``).

    ``steps=True``: the handler takes the ``Delivery`` first and runs its
    outside calls as ``delivery.step(...)``, outside any transaction (see
    ``receive_steps``); a redelivery resumes at the first unfinished step.
    """

    # Refused where the consumer is defined, not at each of its deliveries.
    checked_subscriber(subscriber)

    def decorator(func):
        if isinstance(func, Task):
            # Over the task, it wraps a function no worker calls: the worker
            # runs the bare function Celery registered, without the inbox.
            raise ImproperlyConfigured(
                f"@consumer({subscriber!r}) decorates the Celery task "
                f"{func.name!r}: put it under @shared_task, or use "
                "inbox.api.consumer_task."
            )
        if getattr(func, "subscriber", None) == subscriber:
            # The inner claim would find this one's row, take every message
            # for a duplicate and run nothing, and the message stays applied.
            raise ImproperlyConfigured(
                f"@consumer({subscriber!r}) decorates a consumer of {subscriber!r} "
                "already: keep one (consumer_task includes it)."
            )
        callables.refuse_deferred(func, "Consumer")

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            # Checked before the span: a producer's id the inbox refuses (a
            # megabyte, or a lone surrogate no exporter can encode) must not
            # become its attribute.
            found = checked_message_id(_resolve(message_id, args, kwargs))
            carried = _intent_of(intent, args, kwargs)
            if steps:
                last = _last_attempt()
                with (
                    tracing.processing(subscriber, _trace_context(kwargs), found),
                    receive_steps(
                        subscriber, found, intent=carried, last_attempt=last
                    ) as delivery,
                ):
                    if delivery.duplicate:
                        tracing.annotate(**{"once.duplicate": True})
                        return None
                    return callables.run_now(
                        "Consumer", func, delivery, *args, **kwargs
                    )
            with (
                tracing.processing(subscriber, _trace_context(kwargs), found),
                receive(subscriber, found, intent=carried) as delivery,
            ):
                if delivery.duplicate:
                    tracing.annotate(**{"once.duplicate": True})
                    return None
                return callables.run_now("Consumer", func, *args, **kwargs)

        wrapper.subscriber = subscriber  # type: ignore[attr-defined]
        wrapper.steps = steps  # type: ignore[attr-defined]
        # ConsumerTask names a dead message by it, as the wrapper found it.
        wrapper.message_id_of = functools.partial(_resolve, message_id)  # type: ignore[attr-defined]
        return wrapper

    return decorator


def _resolve(spec, args, kwargs) -> str:
    if callable(spec):
        found = spec(*args, **kwargs)
    elif spec is not None:
        found = kwargs.get(spec)
    else:
        found = message_id_from(kwargs.get("headers"), kwargs.get("payload"))
        if found is None:
            found = kwargs.get("message_id")
        if not _given(found):
            found = _from_task()
    if not _given(found):
        raise MessageIdMissing(
            "Cannot tell this delivery's message id; pass message_id= to @consumer."
        )
    return _text(found)


def _last_attempt() -> bool:
    """Whether this run is a ``ConsumerTask``'s last before its message is
    dead: a steps consumer gives up (compensates) when it fails."""
    task = current_task._get_current_object()  # type: ignore[attr-defined]
    if not isinstance(task, ConsumerTask) or task.request.called_directly:
        return False
    return task.request.retries + 1 >= inbox_settings.MAX_ATTEMPTS


def _intent_of(spec, args, kwargs) -> str | None:
    if callable(spec):
        return spec(*args, **kwargs)
    if spec is not None:
        return kwargs.get(spec)
    return intent_from(kwargs.get("headers")) or _intent_from_task()


def _intent_from_task() -> str | None:
    task = current_task._get_current_object()  # type: ignore[attr-defined]
    if task is None or task.request.called_directly:
        return None
    request = task.request
    return intent_from(
        {name: request.get(name) for name in (INTENT_HEADER, EVENT_HEADERS)}
    )


def _trace_context(kwargs) -> Mapping:
    """Where the producer's trace context is: the ``headers`` keyword argument
    (our publishers' envelope), else the Celery task's own headers."""
    if not tracing.ENABLED:
        return {}
    headers = kwargs.get("headers")
    # Any mapping, as the message id is read from: an HTTP push's
    # request.headers, say, is not a dict.
    if isinstance(headers, Mapping) and headers.get(tracing.TRACEPARENT):
        return headers
    task = current_task._get_current_object()  # type: ignore[attr-defined]
    if task is None or task.request.called_directly:
        return {}
    return task.request.headers or {}


def _from_task() -> str | None:
    task = current_task._get_current_object()  # type: ignore[attr-defined]
    if task is None or task.request.called_directly:
        return None
    request = task.request
    custom = {
        name: request.get(name) for name in (MESSAGE_ID_HEADER, *CLOUDEVENTS_HEADERS)
    }
    return message_id_from(custom) or request.id


class ConsumerTask(workers.PersistentTask):
    """The base of a Celery task that runs an ``@consumer``.

    Nothing a consumer raises is lost. A run that raises is retried with the
    same task id (so the same message id), with capped exponential backoff,
    ``INBOX["MAX_ATTEMPTS"]`` runs in all; after the last one the message is
    recorded as a dead inbox row, which the console lists and can replay, and
    the broker's copy is acked. A worker lost mid-run puts the message back
    in the queue (``reject_on_worker_lost``); so does a failure that cannot
    be retried or recorded (the broker or the database down): the message is
    never acked, or dropped, unrecorded.
    """

    # Acked after the run committed, never before; a lost worker requeues it.
    acks_late = True
    reject_on_worker_lost = True
    # A raise that escapes the handling below rejects the message instead of
    # acking it: on RabbitMQ a dead-letter exchange keeps it.
    acks_on_failure_or_timeout = False
    # INBOX["MAX_ATTEMPTS"] bounds the retries, read at run time.
    max_retries = None

    def __call__(self, *args, **kwargs):
        if self.request.called_directly:
            return super().__call__(*args, **kwargs)
        # In a worker, the request of this run is pushed already:
        # Task.__call__ would push one without its id and retries on top.
        try:
            if self._redelivered():
                self._count_lost_run(args, kwargs)
            return self.run(*args, **kwargs)
        except (Retry, Reject, Ignore):
            raise  # Celery's own flow, raised by the handler on purpose
        except DeliveryBusy as busy:
            # Another worker runs its steps; this copy comes back after the
            # lease, to resume them if that worker died. Never buried.
            workers.come_back(self, busy.retry_after, busy, logger)
        except StepTakenOver as taken:
            # A newer worker took this one's lapsed lease over: the row is its
            # own, and burying it would mark its running steps dead. As for a
            # busy delivery, this copy comes back after the lease.
            lease = inbox_settings.STEPS_LEASE.total_seconds()
            raise self.retry(exc=taken, countdown=lease) from taken
        except Exception as exc:
            self._retry_or_bury(exc, args, kwargs)

    def _redelivered(self) -> bool:
        """Whether the broker delivered this message before without an ack
        (RabbitMQ's flag; kombu's Redis transport sets it on a restored one)."""
        return bool((self.request.delivery_info or {}).get("redelivered"))

    def _count_lost_run(self, args, kwargs):
        """Count the run that ended without an ack: a worker killed mid-run
        (out of memory, a hard time limit) raises nothing, so no retry counts
        it. Once such runs used up ``MAX_ATTEMPTS``, the message is dead (the
        row says so) and acked, instead of killing a worker for ever."""
        subscriber, message_id = _identity(self, args, kwargs)
        error = "its worker died (or lost the broker) before acking it"
        using = router.db_for_write(InboxMessage)
        lost = InboxMessage.objects.count_lost_run(
            subscriber,
            message_id,
            clock.now(),
            error=error,
            redrive=_redrive(self, args, kwargs),
            using=using,
        )
        if lost is None or lost < inbox_settings.MAX_ATTEMPTS:
            return  # applied or running already, or it has runs left
        logger.error(
            "%s[%s] ended without an ack %d time(s) and is dead",
            self.name,
            self.request.id,
            lost,
            extra={"task": self.name, "task_id": self.request.id},
        )
        signals.dead(subscriber, message_id, attempts=lost, error=error, using=using)
        raise Ignore()  # recorded dead: ack the broker's copy

    def _retry_or_bury(self, exc, args, kwargs):
        attempt = self.request.retries + 1
        try:
            last = attempt >= inbox_settings.MAX_ATTEMPTS
            # A refused message id is refused again on every retry.
            if not last and not isinstance(exc, InboxError):
                raise self.retry(exc=exc, countdown=_backoff(attempt))
            buried, dead = _bury(self, exc, attempt, args, kwargs)
        except Retry:
            raise
        except Exception as problem:
            # Cannot retry (broker) or record (database): requeue the message
            # rather than ack or drop it. Celery's retry raises Reject(requeue=
            # False) when its publish fails, which would drop it.
            logger.error(
                "Could not retry or bury %s[%s]; requeued: %r",
                self.name,
                self.request.id,
                problem,
                extra={"task": self.name, "task_id": self.request.id},
            )
            raise Reject(problem, requeue=True) from exc
        logger.error(
            "%s[%s] raised %d time(s) and is dead: %r",
            self.name,
            self.request.id,
            attempt,
            exc,
            extra={"task": self.name, "task_id": self.request.id, **buried},
        )
        if dead:  # not when another delivery applied it meanwhile
            signals.dead(
                **buried,
                attempts=attempt,
                error=_error_text(exc),
                using=router.db_for_write(InboxMessage),
            )
        # Recorded: ack the broker's copy (Ignore acks; a failure would not).
        raise Ignore() from exc


def consumer_task(
    subscriber: str,
    *,
    name: str,
    message_id: str | Callable | None = None,
    intent: str | Callable | None = None,
    steps: bool = False,
    **options,
) -> Callable[[Callable], Task]:
    """``@shared_task(name=..., base=ConsumerTask)`` over ``@consumer(...)``:
    a consumer task with the inbox's acks, retries and dead state. With
    ``steps=True``, a steps consumer whose last attempt compensates."""

    def decorator(func):
        handler = consumer(
            subscriber, message_id=message_id, intent=intent, steps=steps
        )(func)
        _claim_task_name(name, func)
        return shared_task(name=name, base=ConsumerTask, **options)(handler)

    return decorator


# Each consumer_task's function by its Celery task name.
_task_names: dict[str, str] = {}


def _claim_task_name(name: str, func: Callable) -> None:
    """Refuse a task name another consumer_task's function has: Celery keeps
    the first task of a name and hands it to the second, whose function then
    never runs. The same function again (its module imported twice) passes."""
    defined = f"{func.__module__}.{func.__qualname__}"
    taken = _task_names.setdefault(name, defined)
    if taken != defined:
        raise ImproperlyConfigured(
            f"consumer_task(name={name!r}) over {defined}: {taken} has that "
            "Celery task name already, and Celery would run it for both. "
            "Give each consumer task a name of its own."
        )


def _backoff(attempt: int) -> float:
    """Seconds before the next run: doubling, capped, jittered (equal jitter,
    so retries of many failed messages do not come back in step)."""
    cap = inbox_settings.RETRY_BACKOFF_MAX.total_seconds()
    ceiling = min(cap, 2.0**attempt)
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def _bury(task, exc, attempt, args, kwargs) -> tuple[dict, bool]:
    """Record the dead message; return its identity (for the log) and
    whether it is dead (not applied meanwhile by another delivery)."""
    subscriber, message_id = _identity(task, args, kwargs)
    dead = InboxMessage.objects.bury(
        subscriber,
        message_id,
        clock.now(),
        attempts=attempt,
        error=_error_text(exc),
        redrive=_redrive(task, args, kwargs),
        using=router.db_for_write(InboxMessage),
    )
    return {"subscriber": subscriber, "message_id": message_id}, dead


def _error_text(exc) -> str:
    """What a dead row (and its signal) says of the error."""
    return repr(exc)[:2000]


def _identity(task, args, kwargs) -> tuple[str, str]:
    """The subscriber and message id a dead row of ``task``'s run names."""
    subscriber = getattr(task.run, "subscriber", task.name)
    try:
        message_id = checked_message_id(task.run.message_id_of(args, kwargs))
    except Exception:
        # No usable message id (its lookup may be what failed: a message
        # without the field message_id= reads): named by the task id, which a
        # replay keeps. Raising here would requeue the message for ever.
        message_id = _storable_task_id(task.request.id)
    return subscriber, message_id


def _storable_task_id(task_id) -> str:
    """``task_id`` as a dead row's message id. Another service's task id may
    be one the column cannot hold (too long, a NUL): then its digest, the
    same on every redelivery, so the row is found again, never a DataError
    that requeues the message for ever."""
    try:
        return checked_message_id(task_id)
    except MessageIdInvalid:
        raw = str(task_id).encode(errors="surrogatepass")
        return f"sha256:{hashlib.sha256(raw).hexdigest()}"


def _redrive(task, args, kwargs) -> dict | None:
    """What a replay sends again: the same task, id, arguments and headers."""
    request = task.request
    redrive = {
        "task": task.name,
        "id": request.id,
        "args": list(args),
        "kwargs": kwargs,
        "headers": {
            name: value
            for name, value in (request.headers or {}).items()
            if not name.startswith("x-")  # RabbitMQ's x-death and the like
        },
        "queue": (request.delivery_info or {}).get("routing_key"),
        # The exchange it came through: routed there again by its routing
        # key, it reaches the queues a topic or headers binding sent it to.
        "exchange": (request.delivery_info or {}).get("exchange"),
    }
    try:
        # What jsonb refuses (a NUL in the payload) would fail the burial and
        # bring the message back for ever: replay it from the producer then.
        return storable.jsonb(redrive)
    except (TypeError, ValueError):
        return None  # not JSON (a pickle serializer): replay from the producer
