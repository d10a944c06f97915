"""OpenTelemetry spans and W3C trace context, through ``opentelemetry-api``.

The ``[otel]`` extra installs it. Without it the import below fails once, at
startup, and every function here returns at its first line: no span, no
header, no import attempt per call. With it and no SDK configured, the API's
no-op tracer records nothing, and no header is written.

The spans follow OpenTelemetry's messaging conventions: ``create`` when
``record()`` writes an event (its context is the message's creation context,
which travels in the message's ``traceparent`` and ``tracestate``), ``send``
per relay batch, linked to each message's creation context, and ``process``
for each consumer, linked to it too. A ``send`` or ``process`` with no trace
around it (no instrumented Celery, say) continues the trace of the (first)
message it handles, so a request, its event and its consumers show as one
trace.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .stepnames import family

try:
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )
except ImportError:  # the [otel] extra is not installed
    trace = None  # type: ignore[assignment]

ENABLED = trace is not None

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# messaging.system: the outbox and inbox are the messaging system here, on
# whatever broker the publisher sends to.
SYSTEM = "django-once"

if ENABLED:
    # W3C Trace Context whatever the process's global propagator is: the
    # headers are named traceparent and tracestate on the wire.
    _propagator = TraceContextTextMapPropagator()
    # A proxy: it follows the tracer provider the project sets up later.
    tracer = trace.get_tracer("django-once")


def _inject(context=None) -> dict[str, str]:
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=context)
    return carrier


def _extract(headers: Mapping | None):
    """The remote span context ``headers`` carry, or None without a valid one."""
    if not headers or not headers.get(TRACEPARENT):
        return None
    names = (TRACEPARENT, TRACESTATE)
    carrier = {name: _text(headers[name]) for name in names if name in headers}
    context = trace.get_current_span(_propagator.extract(carrier)).get_span_context()
    # A malformed one is none: as the batch's parent it would start a new
    # trace in place of the next message's context.
    return context if context.is_valid else None


def _text(value) -> str:
    """A header's value as text: a Kafka record's are bytes (Debezium's
    router writes its traceparent there), whose str() is "b'00-...'"."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode(errors="replace")
    return str(value)


def carried(headers: Mapping | None) -> dict[str, str]:
    """The valid W3C trace context in ``headers``, as the two headers.

    Parsed and written again by the propagator, so a value a caller chose
    reaches the transport only as a well-formed ``traceparent``.
    """
    if not ENABLED:
        return {}
    span_context = _extract(headers)
    if span_context is None:
        return {}
    return _inject(trace.set_span_in_context(trace.NonRecordingSpan(span_context)))


def _attributes(operation: str, destination: str = "", **more) -> dict[str, Any]:
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
    }
    if destination:
        attributes["messaging.destination.name"] = destination
    attributes.update({name: value for name, value in more.items() if value != ""})
    return attributes


def created(destination: str, message_id) -> dict[str, str]:
    """Make the ``create <destination>`` span of one event and return its
    context as the event's ``traceparent`` and ``tracestate`` ({} when no
    trace is recorded)."""
    if not ENABLED:
        return {}
    with tracer.start_as_current_span(
        f"create {destination}",
        kind=SpanKind.PRODUCER,
        attributes=_attributes(
            "create", destination, **{"messaging.message.id": str(message_id)}
        ),
    ):
        return _inject()


def _parent(creation_contexts: list):
    """The ambient context if a span is active, else the first message's."""
    if trace.get_current_span().get_span_context().is_valid or not creation_contexts:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(creation_contexts[0]))


@contextmanager
def sending(messages: Iterable) -> Iterator[Any]:
    """The ``send`` span of one relay batch (``OutboxMessage`` rows), linked
    to each message's creation context; yields the span, or None."""
    messages = list(messages)
    if not ENABLED or not messages:
        yield None
        return
    contexts = [c for m in messages if (c := _extract(m.headers)) is not None]
    destinations = {m.aggregatetype for m in messages}
    # One destination names the span; a mixed batch has none (the convention).
    destination = destinations.pop() if len(destinations) == 1 else ""
    with tracer.start_as_current_span(
        f"send {destination}".strip(),
        context=_parent(contexts),
        # CLIENT: each message's creation context is its create span, not this.
        kind=SpanKind.CLIENT,
        links=[Link(c) for c in contexts],
        attributes=_attributes(
            "send", destination, **{"messaging.batch.message_count": len(messages)}
        ),
    ) as span:
        yield span


def refused(span, count: int, total: int) -> None:
    """Mark a ``send`` span failed when the broker refused some messages."""
    if span is not None and count:
        span.set_status(Status(StatusCode.ERROR, f"{count} of {total} refused"))


@contextmanager
def processing(
    subscriber: str, headers: Mapping | None, message_id: str
) -> Iterator[Any]:
    """The ``process <subscriber>`` span of one delivery, linked to (and with
    no trace around it, a child of) the creation context in ``headers``."""
    if not ENABLED:
        yield None
        return
    contexts = [c for c in (_extract(headers),) if c is not None]
    with tracer.start_as_current_span(
        f"process {subscriber}",
        context=_parent(contexts),
        kind=SpanKind.CONSUMER,
        links=[Link(c) for c in contexts],
        attributes=_attributes(
            "process",
            **{
                "messaging.consumer.group.name": subscriber,
                "messaging.message.id": message_id,
            },
        ),
    ) as span:
        yield span


@contextmanager
def webhook(operation: str, source: str, **attributes) -> Iterator[Any]:
    """The ``receive <source>`` (the intake) or ``process <source>`` span of a
    webhook delivery, in the current trace."""
    if not ENABLED:
        yield None
        return
    with tracer.start_as_current_span(
        f"{operation} {source}",
        kind=SpanKind.CONSUMER,
        attributes=_attributes(operation, source, **attributes),
    ) as span:
        yield span


def stepped(fn: Callable, name: str, kind: str, attempt: int) -> Callable:
    """``fn`` running in a ``step <family>`` span (few names, as OpenTelemetry
    asks): a durable step's work, or its undo's (``undo:<name>``), in the
    current trace."""
    if not ENABLED:
        return fn
    attributes: dict[str, str | int] = {
        "once.unit.kind": kind,
        "once.step.name": name,
        "once.step.attempt": attempt,
    }

    def run(*args):
        with tracer.start_as_current_span(
            f"step {family(name)}", kind=SpanKind.INTERNAL, attributes=attributes
        ):
            return fn(*args)

    return run


def annotate(**attributes) -> None:
    """Set attributes on the current span (the request's server span)."""
    if ENABLED:
        trace.get_current_span().set_attributes(attributes)


def java_properties(headers: Mapping | None) -> str:
    """The trace context in ``headers`` as a serialized ``java.util.Properties``,
    what Debezium's outbox event router reads from ``tracingspancontext``; ""
    without a valid context."""
    values = carried(headers)
    return "".join(f"{name}={_escape(value)}\n" for name, value in values.items())


def _escape(value: str) -> str:
    # Properties.store() escapes these in values; tracestate may hold = and :.
    for char in "\\=:#!":
        value = value.replace(char, "\\" + char)
    return value
