"""The publisher extension point and the envelope every publisher sends."""

from kombu import Queue

from idempotency.shared import tracing
from idempotency.shared.headers import (
    EVENT_HEADERS,
    INTENT_HEADER,
    INTENT_PATTERN,
    MESSAGE_ID_HEADER,
)
from idempotency.shared.settings import InvalidSetting, duration

from ..exceptions import OutboxConfigurationError


class BasePublisher:
    """Extension point: subclass it and implement ``publish()``."""

    def open(self) -> None:
        """Acquire what publishing needs (a connection); called once per drain."""

    def close(self) -> None:
        """Release what ``open()`` acquired."""

    def publish(self, message) -> None:
        """Hand over one ``OutboxMessage``; raise when the broker did not take it."""
        raise NotImplementedError(".publish() must be overridden.")

    def longest_wait(self) -> float:
        """Seconds one ``publish_many()`` may spend waiting on the broker
        (connecting, confirms); 0 when it does not say. ``OUTBOX['LEASE']``
        must be longer (outbox.E012): a batch still awaited after its lease
        is claimed and published again by the next relay."""
        return 0

    def publish_many(self, messages) -> dict:
        """Hand over several messages; return ``{message id: exception}`` for
        each the broker did not take, keyed by ``message.id`` or its text.
        Every other one is held by the broker. The relay fails the whole
        batch on an answer that is not a mapping or names another message."""
        refused = {}
        for message in messages:
            try:
                self.publish(message)
            except Exception as exc:  # any failure is that message's failed attempt
                refused[message.id] = exc
        return refused

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc_info):
        self.close()


def envelope(message) -> tuple[object, dict]:
    """The body and headers every publisher sends, shaped like Debezium's router:
    the payload as the body, the event type and ids as headers, and the event's
    own headers in a namespace of their own, so none can steer the transport.
    The intent the event serves travels like its message id: beside the
    transport's headers (only a well-formed one) and inside the event's own.
    The event's trace context goes at the top as well, where consumers'
    OpenTelemetry instrumentation looks for ``traceparent`` and
    ``tracestate``: parsed and written again, so only a well-formed one."""
    headers = {
        **tracing.carried(message.headers),
        "id": str(message.id),
        "type": message.type,
        "aggregatetype": message.aggregatetype,
        "aggregateid": message.aggregateid,
        MESSAGE_ID_HEADER: str(message.id),
        EVENT_HEADERS: dict(message.headers),
    }
    intent = message.headers.get(INTENT_HEADER)
    # Only a well-formed digest: a caller's "a\r\nb: c" stays in EVENT_HEADERS,
    # where it cannot steer the transport.
    if isinstance(intent, str) and INTENT_PATTERN.fullmatch(intent):
        headers[INTENT_HEADER] = intent
    return message.payload, headers


def timeout_seconds(value, publisher: str, option: str) -> float:
    """Seconds to wait for the broker (its confirms, a connection), refused
    here, in the running relay: 0, NaN or a string would fail or hang every
    batch instead of waiting."""
    try:
        return duration(value).total_seconds()
    except InvalidSetting as exc:
        raise OutboxConfigurationError(
            f"{publisher} {option} {exc} {exc.hint}".strip()
        ) from None


# Queue arguments under which RabbitMQ drops a message it confirmed: a TTL, a
# queue expiry, a length cap dropping the oldest (unless overflow rejects the
# publish, which nacks it and leaves the message pending).
_DROPPING_ARGUMENTS = {
    "message_ttl": "x-message-ttl",
    "expires": "x-expires",
    "max_length": "x-max-length",
    "max_length_bytes": "x-max-length-bytes",
}
_CAPS = ("max_length", "max_length_bytes")
_REJECTING_OVERFLOW = frozenset({"reject-publish", "reject-publish-dlx"})


def forgetful(queue) -> str | None:
    """Why ``queue`` would lose a message the broker confirmed, or None.

    "Published" means a queue holds the message, so a queue that forgets it
    (on a broker restart, when its last consumer leaves, past a TTL or a
    length) turns a published event into a lost one.
    """
    if not isinstance(queue, Queue):
        return f"{queue!r:.60}, not a kombu Queue"
    name = queue.name
    if not queue.durable:
        return f"queue {name!r} with durable=False (lost on a broker restart)"
    # exclusive first: kombu sets auto_delete on an exclusive queue too.
    for flag in ("exclusive", "auto_delete"):
        if getattr(queue, flag):
            return f"queue {name!r} with {flag}=True (deleted with its messages)"
    arguments = queue.queue_arguments or {}
    rejects = arguments.get("x-overflow") in _REJECTING_OVERFLOW
    for option, argument in _DROPPING_ARGUMENTS.items():
        if option in _CAPS and rejects:
            continue
        if getattr(queue, option) is not None:
            return f"queue {name!r} with {option} (it drops messages)"
        if argument in arguments:
            return f"queue {name!r} with {argument} (it drops messages)"
    return None
