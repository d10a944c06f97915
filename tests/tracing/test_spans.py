"""Each app's spans, in this process: what they are named, what they are
children of and what they link to (the OpenTelemetry messaging conventions)."""

import pytest
from django.db import transaction
from django.db.models.signals import post_save
from django.http.request import HttpHeaders
from django.test import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import (
    TraceContextTextMapPropagator,
)

from inbox.api import consumer, consumer_task
from inbox.exceptions import MessageIdInvalid
from inbox.models import InboxMessage
from outbox import relay
from outbox.api import record
from outbox.models import OutboxMessage
from outbox.publishers import InMemoryPublisher, envelope
from tests.testapp import views
from tests.webhooks import signing
from webhooks import processing
from webhooks.models import WebhookReceipt

from . import in_memory, tracer_for

pytestmark = pytest.mark.django_db

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans(monkeypatch):
    """The library's spans of this test (and the test's own request spans)."""
    return in_memory(monkeypatch)


@pytest.fixture
def request_span(spans):
    """Start a server span, as a project's HTTP instrumentation would."""
    tracer = tracer_for(spans)

    def start(name="POST /api/orders/"):
        return tracer.start_as_current_span(name, kind=SpanKind.SERVER)

    return start


def named(spans: InMemorySpanExporter, name):
    return [span for span in spans.get_finished_spans() if span.name == name]


def header_of(span):
    context = span.get_span_context()
    return (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )


def header_of_ids(trace_id, span_id):
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def record_order(n=1, aggregate_type="order", **options):
    with transaction.atomic():
        return record(aggregate_type, n, "order.created", {"n": n}, **options)


def test_record_stores_the_context_of_its_create_span_a_child_of_the_request(
    spans, request_span
):
    with request_span() as request:
        message_id = record_order()

    (create,) = named(spans, "create order")
    assert create.kind == SpanKind.PRODUCER
    assert create.parent.span_id == request.get_span_context().span_id
    assert create.attributes["messaging.operation.type"] == "create"
    assert create.attributes["messaging.destination.name"] == "order"
    assert create.attributes["messaging.message.id"] == str(message_id)
    headers = OutboxMessage.objects.get().headers
    assert headers["traceparent"] == header_of(create)


def test_with_no_tracer_configured_record_writes_no_trace_context():
    # The API without an SDK: a no-op tracer, no span, no header.
    record_order()
    assert "traceparent" not in OutboxMessage.objects.get().headers


def test_a_trace_context_the_caller_gives_wins(spans, request_span):
    with request_span():
        record_order(headers={"traceparent": TRACEPARENT})

    assert OutboxMessage.objects.get().headers["traceparent"] == TRACEPARENT


def test_a_traceparent_the_caller_gives_never_takes_the_ambient_tracestate(spans):
    # The ambient trace's tracestate describes that trace: beside the
    # caller's traceparent it would tell consumers' vendors another story.
    ambient = TraceContextTextMapPropagator().extract(
        {"traceparent": header_of_ids(1, 2), "tracestate": "vendor=ambient"}
    )
    with tracer_for(spans).start_as_current_span("request", context=ambient):
        record_order(headers={"traceparent": TRACEPARENT})

    headers = OutboxMessage.objects.get().headers
    assert headers["traceparent"] == TRACEPARENT
    assert "tracestate" not in headers


def test_a_tracestate_the_caller_gives_alone_never_pairs_with_the_create_span(
    spans, request_span
):
    # Without its traceparent, the caller's tracestate describes some other
    # trace: beside the create span's traceparent it would tell consumers'
    # vendors another story.
    with request_span():
        record_order(headers={"tracestate": "vendor=foreign"})

    (create,) = named(spans, "create order")
    headers = OutboxMessage.objects.get().headers
    assert headers["traceparent"] == header_of(create)
    assert "tracestate" not in headers
    _, top = envelope(OutboxMessage.objects.get())
    assert "tracestate" not in top


def test_the_envelope_carries_the_context_in_top_level_headers(spans, request_span):
    with request_span():
        record_order()
    message = OutboxMessage.objects.get()

    _, headers = envelope(message)
    # Where consumers' instrumentation looks, and in the event's own too.
    assert headers["traceparent"] == message.headers["traceparent"]
    assert headers["once-headers"]["traceparent"] == headers["traceparent"]


def test_a_malformed_traceparent_never_reaches_the_top_level_headers():
    with transaction.atomic():
        record("order", 1, "order.created", {}, headers={"traceparent": "a\r\nb: c"})

    _, headers = envelope(OutboxMessage.objects.get())
    assert "traceparent" not in headers
    assert headers["once-headers"]["traceparent"] == "a\r\nb: c"


def test_the_relay_makes_one_send_span_per_batch_linked_to_each_create(
    spans, request_span, sent
):
    for n in range(3):
        with request_span():
            record_order(n)
    creates = named(spans, "create order")

    relay.drain(batch_size=2)

    first, second = named(spans, "send order")
    assert first.kind == SpanKind.CLIENT
    assert first.attributes["messaging.batch.message_count"] == 2
    links = [link.context.span_id for span in (first, second) for link in span.links]
    assert links == [create.context.span_id for create in creates]
    # No trace around the relay: the batch continues its first message's.
    assert first.parent.span_id == creates[0].context.span_id
    assert first.context.trace_id == creates[0].context.trace_id
    assert len(sent) == 3


def test_a_send_inside_a_trace_is_its_child_and_still_links_each_create(
    spans, request_span, sent
):
    with request_span():
        record_order()
    (create,) = named(spans, "create order")

    with request_span("relay") as around:
        relay.drain()

    (send,) = named(spans, "send order")
    assert send.parent.span_id == around.get_span_context().span_id
    assert [link.context.span_id for link in send.links] == [create.context.span_id]


def test_a_batch_continues_the_first_valid_context_past_a_malformed_one(
    spans, request_span, sent
):
    # A traceparent the producer gave is kept as it is: a malformed one is
    # no context, neither the batch's parent nor a link.
    record_order(1, headers={"traceparent": "a\r\nb: c"})
    with request_span():
        record_order(2)
    _, create = named(spans, "create order")

    relay.drain()

    (send,) = named(spans, "send order")
    assert send.parent.span_id == create.context.span_id
    assert send.context.trace_id == create.context.trace_id
    assert [link.context.span_id for link in send.links] == [create.context.span_id]


def test_a_batch_of_several_destinations_is_named_send_alone(spans, request_span, sent):
    with request_span():
        record_order(1, "order")
        record_order(2, "invoice")

    relay.drain()

    (send,) = named(spans, "send")
    assert "messaging.destination.name" not in send.attributes


def test_a_refused_batch_marks_its_send_span_failed(
    spans, request_span, sent, steady_backoff
):
    with request_span():
        record_order()
    InMemoryPublisher.failing = True

    relay.drain()

    (send,) = named(spans, "send order")
    assert send.status.status_code == StatusCode.ERROR


@consumer("billing")
def handle(*, payload, headers):
    return payload


def test_the_consumer_process_span_continues_the_producers_trace(
    spans, request_span, sent
):
    with request_span():
        record_order()
    relay.drain()
    (create,) = named(spans, "create order")
    delivery = sent[0]

    handle(payload=delivery.payload, headers=delivery.headers)
    handle(payload=delivery.payload, headers=delivery.headers)  # redelivered

    first, again = named(spans, "process billing")
    assert first.kind == SpanKind.CONSUMER
    assert first.parent.span_id == create.context.span_id
    assert [link.context.span_id for link in first.links] == [create.context.span_id]
    assert first.attributes["messaging.consumer.group.name"] == "billing"
    assert first.attributes["messaging.message.id"] == delivery.id
    assert "once.duplicate" not in first.attributes
    assert again.attributes["once.duplicate"] is True
    assert InMemoryPublisher.sent and InboxMessage.objects.count() == 1


def test_a_consumer_inside_a_trace_is_its_child_and_links_the_producer(
    spans, request_span
):
    with request_span("task"):
        handle(
            payload={}, headers={"once-message-id": "m-1", "traceparent": TRACEPARENT}
        )
    with request_span("task") as around:
        handle(
            payload={}, headers={"once-message-id": "m-2", "traceparent": TRACEPARENT}
        )

    process = named(spans, "process billing")[-1]
    assert process.parent.span_id == around.get_span_context().span_id
    assert [f"{link.context.span_id:016x}" for link in process.links] == [
        TRACEPARENT.split("-")[2]
    ]


@consumer_task("billing-task", name="tests.tracing.billing")
def billing_task(*, payload):
    return payload


def test_a_consumer_task_finds_the_context_in_its_task_headers(spans):
    # No headers keyword argument: the Celery message's own headers.
    billing_task.apply(
        kwargs={"payload": {}}, task_id="m-3", headers={"traceparent": TRACEPARENT}
    )

    (process,) = named(spans, "process billing-task")
    assert [f"{link.context.span_id:016x}" for link in process.links] == [
        TRACEPARENT.split("-")[2]
    ]


def test_a_context_in_bytes_headers_is_parent_and_link(spans):
    # A Kafka record's header values are bytes: Debezium's outbox router
    # writes the traceparent there.
    span_id = TRACEPARENT.split("-")[2]
    handle(
        payload={},
        headers={"once-message-id": b"m-5", "traceparent": TRACEPARENT.encode()},
    )

    (process,) = named(spans, "process billing")
    assert f"{process.parent.span_id:016x}" == span_id
    assert [f"{link.context.span_id:016x}" for link in process.links] == [span_id]


def test_a_context_in_headers_that_are_a_mapping_but_no_dict_is_parent_and_link(
    spans,
):
    # An HTTP push subscription's consumer handing over request.headers: the
    # message id is read from them, and so is the trace context.
    span_id = TRACEPARENT.split("-")[2]
    headers = HttpHeaders(
        {"HTTP_ONCE_MESSAGE_ID": "m-6", "HTTP_TRACEPARENT": TRACEPARENT}
    )
    handle(payload={}, headers=headers)

    assert InboxMessage.objects.get().message_id == "m-6"
    (process,) = named(spans, "process billing")
    assert f"{process.parent.span_id:016x}" == span_id
    assert [f"{link.context.span_id:016x}" for link in process.links] == [span_id]


def test_a_malformed_context_is_neither_parent_nor_link(spans):
    handle(payload={}, headers={"once-message-id": "m-4", "traceparent": "00-zz"})

    (process,) = named(spans, "process billing")
    assert process.parent is None
    assert list(process.links) == []


@pytest.mark.parametrize(
    "refused", [b"m-\xff", "m" * 256], ids=["not-utf-8", "too-long"]
)
def test_a_message_id_the_inbox_refuses_never_reaches_a_span(spans, refused):
    # A foreign producer chose it: an exporter would ship it as it came (a
    # megabyte of it, or the lone surrogate a non-UTF-8 one decodes to, which
    # OTLP's protobuf cannot encode: the whole export batch would be lost).
    with pytest.raises(MessageIdInvalid):
        handle(
            payload={},
            headers={"once-message-id": refused, "traceparent": TRACEPARENT},
        )

    assert named(spans, "process billing") == []
    assert not InboxMessage.objects.exists()


@pytest.fixture
def github(settings):
    settings.WEBHOOKS = {
        "SOURCES": {
            "github": {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]}
        }
    }


def deliver(body, headers):
    return Client().post(
        "/webhooks/github/", body, content_type="application/json", headers=headers
    )


def test_a_webhook_has_a_receive_span_at_intake_and_a_process_span(spans, github):
    body = signing.event_body("evt_1")
    assert (
        deliver(body, signing.github_headers(body, delivery_id="evt_1")).status_code
        == 202
    )
    forged = signing.github_headers(body, secret="wrong", delivery_id="evt_2")
    assert deliver(body, forged).status_code == 401
    # An unknown source would be named by the URL: no span.
    Client().post("/webhooks/nosuchsource/", b"{}", content_type="application/json")

    processing.process(WebhookReceipt.objects.get().pk)

    accepted, refused = named(spans, "receive github")
    assert accepted.status.status_code == StatusCode.UNSET
    assert refused.status.status_code == StatusCode.ERROR
    (process,) = named(spans, "process github")
    assert process.attributes["messaging.message.id"] == "evt_1"
    assert len(spans.get_finished_spans()) == 3


def test_every_messaging_span_names_the_system_its_operation_and_destination(
    spans, github, sent
):
    # docs/observability.md, "The spans": messaging.system is django-once,
    # and messaging.operation.name and .type are the name's first word.
    record_order()
    relay.drain()
    handle(payload=sent[0].payload, headers=sent[0].headers)
    body = signing.event_body("evt_1")
    deliver(body, signing.github_headers(body, delivery_id="evt_1"))
    processing.process(WebhookReceipt.objects.get().pk)

    found = {
        span.name: (span.kind, dict(span.attributes))
        for span in spans.get_finished_spans()
    }
    assert sorted(found) == [
        "create order",
        "process billing",
        "process github",
        "receive github",
        "send order",
    ]
    for name, (_kind, attributes) in found.items():
        operation = name.split()[0]
        assert attributes["messaging.system"] == "django-once"
        assert attributes["messaging.operation.name"] == operation
        assert attributes["messaging.operation.type"] == operation
    assert {name: kind for name, (kind, _attributes) in found.items()} == {
        "create order": SpanKind.PRODUCER,
        "send order": SpanKind.CLIENT,
        "process billing": SpanKind.CONSUMER,
        "receive github": SpanKind.CONSUMER,
        "process github": SpanKind.CONSUMER,
    }
    for name in ("receive github", "process github"):
        assert found[name][1]["messaging.destination.name"] == "github"
    assert found["process github"][1]["messaging.message.id"] == "evt_1"


def test_a_refused_webhooks_receive_span_never_holds_its_body(spans, github):
    # parse_qsl's error quotes the field it refuses: the refusal must not.
    body = b"payload=%7B%7D&SECRETBODYCONTENT"
    headers = signing.github_headers(body, delivery_id="evt_1")
    answer = Client().post(
        "/webhooks/github/",
        body,
        content_type="application/x-www-form-urlencoded",
        headers=headers,
    )

    assert answer.status_code == 400
    (refused,) = named(spans, "receive github")
    assert refused.status.status_code == StatusCode.ERROR
    [exception] = refused.events
    recorded = repr(dict(exception.attributes)) + repr(refused.status)
    assert "form body malformed" in recorded
    assert "SECRETBODYCONTENT" not in recorded


def order(api, key, quantity=1, **headers):
    return api.post("/api/orders/", {"sku": "BOOK-1", "quantity": quantity}, key=key)


def idempotency_attributes(span):
    return {
        name: value
        for name, value in span.attributes.items()
        if name.startswith("idempotency.")
    }


def test_a_keyed_request_says_its_outcome_on_the_server_span_never_its_key(
    spans, request_span, api
):
    key = "order-secret-key-1"
    outcomes = []
    for quantity in (1, 1, 2):  # runs, replays, then reuses the key
        with request_span() as span:
            order(api, key, quantity)
        outcomes.append(idempotency_attributes(span))

    assert outcomes == [
        {
            "idempotency.operation": "order.create",
            "idempotency.outcome": outcome,
            "idempotency.replayed": outcome == "replayed",
        }
        for outcome in ("executed", "replayed", "key-reused")
    ]
    everything = [
        value
        for span in spans.get_finished_spans()
        for value in span.attributes.values()
    ]
    assert not any(key in str(value) for value in everything)


def test_a_keyed_request_whose_view_raised_says_failed(spans, request_span, api):
    views.faults["raise"] = 1
    with request_span() as span, pytest.raises(RuntimeError):
        api.post("/t/widgets/", {"name": "a"}, key="k")
    assert idempotency_attributes(span) == {
        "idempotency.operation": "widget.create",
        "idempotency.outcome": "failed",
        "idempotency.replayed": False,
    }


def test_a_request_refused_for_its_key_says_why(spans, request_span, api):
    with request_span() as span:
        api.post("/api/orders/", {"sku": "BOOK-1", "quantity": 1})
    assert idempotency_attributes(span)["idempotency.outcome"] == "key-missing"


def test_a_request_without_a_key_where_one_is_optional_adds_nothing(
    spans, request_span, api
):
    with request_span() as span:
        assert api.post("/t/optional/", {"name": "w"}).status_code == 201
    assert idempotency_attributes(span) == {}


def test_a_request_without_a_key_that_fails_validation_adds_nothing(
    spans, request_span, api
):
    # Not a keyed request: nothing was "not kept", whatever the view answered.
    with request_span() as span:
        assert api.post("/t/optional/", {"name": ""}).status_code == 400
    assert idempotency_attributes(span) == {}


# Debezium mode needs PostgreSQL: record() refuses it elsewhere.
@pytest.mark.postgresql
def test_in_debezium_mode_record_writes_the_routers_tracing_column(
    spans, request_span, settings
):
    settings.OUTBOX = {**settings.OUTBOX, "RELAY": "debezium"}
    written = []

    def keep(instance, **kwargs):
        written.append(instance.tracingspancontext)

    post_save.connect(keep, sender=OutboxMessage, weak=False)
    try:
        with request_span():
            record_order()
    finally:
        post_save.disconnect(keep, sender=OutboxMessage)

    (create,) = named(spans, "create order")
    assert written == [f"traceparent={header_of(create)}\n"]
    assert not OutboxMessage.objects.exists()  # CDC read it; nothing stays


@pytest.mark.django_db(transaction=True)
def test_each_durable_step_and_each_undo_is_a_span_of_the_current_trace(
    spans, request_span
):
    from idempotency.shared.steps import begin
    from tests.idempotency.shared.test_steps import LEASE, UNIT, charge, refund

    with request_span() as request:
        steps = begin(UNIT, "payment.create (user:1)", lease=LEASE)
        steps.step("charge", charge, undo=refund)
        steps.step("charge", charge, undo=refund)  # done: no call, no span
        steps.give_up("declined")

    step, undo = (
        span for span in spans.get_finished_spans() if span.name != "POST /api/orders/"
    )
    assert (step.name, undo.name) == ("step charge", "step undo:charge")
    for span in (step, undo):
        assert span.parent.span_id == request.get_span_context().span_id
        assert span.attributes["once.unit.kind"] == "keys"
    # Compensating takes the unit over: an attempt of its own.
    assert (
        step.attributes["once.step.attempt"],
        undo.attributes["once.step.attempt"],
    ) == (1, 2)
    assert UNIT.derive("charge") not in str(dict(step.attributes))


@pytest.mark.django_db(transaction=True)
def test_a_step_named_per_item_is_a_span_named_by_its_family(spans, request_span):
    """Span names stay few (OpenTelemetry asks it): a loop's per-item step
    names share one, as their metric label does; the full name stays an
    attribute, where an id is at home."""
    from idempotency.shared.steps import begin
    from tests.idempotency.shared.test_steps import LEASE, UNIT, charge, refund

    with request_span():
        steps = begin(UNIT, "payment.create (user:1)", lease=LEASE)
        steps.step("charge:42", charge, undo=refund)
        steps.give_up("declined")

    step, undo = (
        span for span in spans.get_finished_spans() if span.name != "POST /api/orders/"
    )
    assert (step.name, undo.name) == ("step charge", "step undo:charge")
    assert step.attributes["once.step.name"] == "charge:42"
    assert undo.attributes["once.step.name"] == "undo:charge:42"
