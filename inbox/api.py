"""Apply each message once: ``receive()`` and the ``@consumer`` decorator."""

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from celery import current_task
from django.db import router, transaction

from idempotency.shared import clock

from .exceptions import MessageIdMissing
from .models import InboxMessage

# Where a message id is looked up, in order: our outbox's header, Debezium's
# event router header, then a CloudEvents attribute (binary mode header).
OUTBOX_HEADER = "once-message-id"
DEBEZIUM_HEADER = "id"
CLOUDEVENTS_HEADERS = ("ce_id", "ce-id")

logger = logging.getLogger("inbox")


@dataclass(frozen=True)
class Delivery:
    subscriber: str
    message_id: str
    duplicate: bool


@contextmanager
def receive(
    subscriber: str, message_id: str, *, using: str | None = None
) -> Iterator[Delivery]:
    """Open (or join) a transaction and claim ``message_id`` for ``subscriber``.

    Run the business mutation inside the block, unless ``delivery.duplicate``.
    An exception rolls back the mutation and the claim together, so the
    redelivery processes again.
    """
    if not subscriber or not message_id:
        raise MessageIdMissing("receive() needs a subscriber and a message id.")
    using = using or router.db_for_write(InboxMessage)
    message_id = str(message_id)
    # savepoint=False: inside the caller's transaction this costs no extra
    # round trips, and a failure must roll the caller's work back anyway.
    with transaction.atomic(using=using, savepoint=False):
        inserted = InboxMessage.objects.claim(
            subscriber, message_id, clock.now(), using=using
        )
        if not inserted:
            logger.info("Dropped a redelivery of %s to %s", message_id, subscriber)
        yield Delivery(subscriber, message_id, duplicate=not inserted)


def message_id_from(headers: dict | None = None, body=None) -> str | None:
    """Find the message id of a delivery: our header, Debezium's, CloudEvents'."""
    headers = headers or {}
    for name in (OUTBOX_HEADER, DEBEZIUM_HEADER, *CLOUDEVENTS_HEADERS):
        if headers.get(name):
            return str(headers[name])
    # A structured-mode CloudEvent carries its id in the body.
    if isinstance(body, dict) and "specversion" in body and body.get("id"):
        return str(body["id"])
    return None


def consumer(
    subscriber: str, *, message_id: str | Callable | None = None
) -> Callable[[Callable], Callable]:
    """Make a message handler apply each message once for ``subscriber``.

    Works on plain callables and under ``@shared_task(acks_late=True)``: the
    task acks only after the handler's transaction committed, and a redelivery
    then finds the id and is acked without running the handler again.

    ``message_id`` is a keyword argument name, a function of the handler's
    arguments, or None: then the ``headers`` keyword argument (see
    ``message_id_from``), the ``payload`` CloudEvent, a ``message_id`` keyword
    argument, the Celery task's headers and finally its task id.
    """

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            found = _resolve(message_id, args, kwargs)
            with receive(subscriber, found) as delivery:
                if delivery.duplicate:
                    return None
                return func(*args, **kwargs)

        wrapper.subscriber = subscriber  # type: ignore[attr-defined]
        return wrapper

    return decorator


def _resolve(spec, args, kwargs) -> str:
    if callable(spec):
        found = spec(*args, **kwargs)
    elif spec is not None:
        found = kwargs.get(spec)
    else:
        found = (
            message_id_from(kwargs.get("headers"), kwargs.get("payload"))
            or kwargs.get("message_id")
            or _from_task()
        )
    if not found:
        raise MessageIdMissing(
            "Cannot tell this delivery's message id; pass message_id= to @consumer."
        )
    return str(found)


def _from_task() -> str | None:
    task = current_task._get_current_object()  # type: ignore[attr-defined]
    if task is None or task.request.called_directly:
        return None
    request = task.request
    custom = {name: request.get(name) for name in (OUTBOX_HEADER, *CLOUDEVENTS_HEADERS)}
    return message_id_from(custom) or request.id
