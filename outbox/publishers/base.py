"""The publisher extension point and the envelope every publisher sends."""

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
