"""receive() and @consumer: each message applied once per subscriber."""

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from kombu import Connection, Exchange, Queue

from idempotency.shared.steps import Abandon
from inbox.api import (
    consumer,
    consumer_task,
    message_id_from,
    receive,
    receive_steps,
)
from inbox.exceptions import MessageIdInvalid, MessageIdMissing, SubscriberInvalid
from inbox.models import InboxMessage
from tests.conftest import run_concurrently
from tests.servers import AMQP_URL
from tests.signals import listening
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


def apply(subscriber, message_id):
    """A consumer: one Widget per message it applies."""
    with receive(subscriber, message_id) as delivery:
        if not delivery.duplicate:
            Widget.objects.create(name=message_id)
    return delivery


def test_the_first_delivery_applies_and_a_redelivery_is_a_duplicate():
    first = apply("stock", "m1")
    again = apply("stock", "m1")

    assert (first.duplicate, again.duplicate) == (False, True)
    assert Widget.objects.count() == 1
    row = InboxMessage.objects.get()
    assert (row.subscriber, row.message_id, row.duplicates) == ("stock", "m1", 1)
    apply("stock", "m1")
    row.refresh_from_db()
    assert row.duplicates == 2


def test_ids_are_keyed_per_subscriber_never_globally():
    assert not apply("stock", "m1").duplicate
    assert not apply("mailer", "m1").duplicate
    assert Widget.objects.count() == 2


def test_an_exception_rolls_back_the_work_and_the_claim_so_redelivery_runs():
    with pytest.raises(Boom), receive("stock", "m1") as delivery:
        assert not delivery.duplicate
        Widget.objects.create(name="m1")
        raise Boom

    assert Widget.objects.count() == 0
    assert InboxMessage.objects.count() == 0
    assert not apply("stock", "m1").duplicate
    assert Widget.objects.count() == 1


def test_a_consumer_that_abandons_rolls_back_and_is_not_applied_again():
    """Abandon gives the delivery up, as in a steps consumer: with no steps
    to undo, its work rolls back, and the message is applied so no
    redelivery runs it again (a ConsumerTask retried it, then buried it)."""
    calls = []

    @consumer("stock")
    def on_order(*, payload, headers):
        calls.append(payload)
        Widget.objects.create(name="reserved")
        raise Abandon("the order was cancelled")

    headers = {"once-message-id": "m1"}
    with listening() as heard:
        assert on_order(payload={"n": 1}, headers=headers) is None
    assert on_order(payload={"n": 1}, headers=headers) is None

    assert calls == [{"n": 1}]
    assert Widget.objects.count() == 0
    assert InboxMessage.objects.get().state == InboxMessage.State.APPLIED
    [abandoned] = heard.of("message_abandoned")
    assert abandoned == {
        "subscriber": "stock",
        "message_id": "m1",
        "reason": "the order was cancelled",
    }


def test_an_abandon_inside_the_callers_transaction_is_the_callers():
    # Its work and the claim roll back with the caller's transaction, which
    # decides: nothing here may commit.
    with pytest.raises(Abandon), transaction.atomic(), receive("stock", "m1"):
        Widget.objects.create(name="m1")
        raise Abandon("the order was cancelled")

    assert InboxMessage.objects.count() == 0
    assert Widget.objects.count() == 0


def test_receive_joins_the_callers_transaction():
    with pytest.raises(Boom), transaction.atomic():
        apply("stock", "m1")
        raise Boom

    assert InboxMessage.objects.count() == 0
    assert Widget.objects.count() == 0


@pytest.mark.postgresql
def test_receive_is_one_statement_for_a_first_delivery_and_for_a_duplicate():
    with CaptureQueriesContext(connection) as first, receive("stock", "m1"):
        pass
    # Inside the caller's transaction: no savepoint either.
    with (
        transaction.atomic(),
        CaptureQueriesContext(connection) as again,
        receive("stock", "m1") as delivery,
    ):
        assert delivery.duplicate

    # BEGIN and COMMIT are the transaction receive() opened; the claim, its
    # duplicate count included, is one INSERT … ON CONFLICT DO UPDATE.
    assert [query["sql"].split()[0] for query in first] == ["BEGIN", "INSERT", "COMMIT"]
    assert [query["sql"].split()[0] for query in again] == ["INSERT"]
    assert InboxMessage.objects.get().duplicates == 1


def test_a_duplicate_leaves_the_callers_transaction_usable():
    apply("stock", "m1")
    with transaction.atomic():
        assert apply("stock", "m1").duplicate
        Widget.objects.create(name="after the duplicate")

    assert Widget.objects.count() == 2


def test_receive_needs_a_message_id():
    with pytest.raises(MessageIdMissing), receive("stock", ""):
        pass


@pytest.mark.postgresql
def test_two_workers_racing_on_one_message_make_one_effect(isolation_level):
    entered = threading.Event()

    def work(index):
        with receive("stock", "m1") as delivery:
            if delivery.duplicate:
                # It waited on the unique index until the winner committed.
                assert Widget.objects.count() == 1
                return "duplicate"
            entered.set()
            Widget.objects.create(name="m1")
            time.sleep(0.3)  # hold the claim while the other one arrives
            return "applied"

    results = run_concurrently(2, work)

    assert sorted(results) == ["applied", "duplicate"]
    assert Widget.objects.count() == 1
    assert InboxMessage.objects.get().duplicates == 1


@pytest.mark.postgresql
def test_a_racing_duplicate_runs_when_the_winner_rolls_back():
    claimed = threading.Event()

    def work(index):
        if index == 1:
            claimed.wait(10)  # arrive while the first holds the claim
        try:
            with receive("stock", "m1") as delivery:
                if delivery.duplicate:
                    return "duplicate"
                Widget.objects.create(name=f"m1-{index}")
                if index == 0:
                    claimed.set()
                    time.sleep(0.3)
                    raise Boom
                return "applied"
        except Boom:
            return "rolled back"

    results = run_concurrently(2, work)

    assert results == ["rolled back", "applied"]  # a rolled-back claim is no claim
    assert list(Widget.objects.values_list("name", flat=True)) == ["m1-1"]


def test_message_id_lookup_order():
    assert message_id_from({"once-message-id": "a", "id": "b"}) == "a"
    assert message_id_from({"id": "b", "ce_id": "c"}) == "b"  # Debezium
    assert message_id_from({"ce_id": "c"}) == "c"  # CloudEvents, binary mode
    cloud_event = {"specversion": "1.0", "id": "d", "type": "x", "source": "/s"}
    assert message_id_from({}, cloud_event) == "d"  # CloudEvents, structured
    assert message_id_from({}, {"id": "not a cloud event"}) is None


def test_a_message_id_in_bytes_is_the_same_id_as_its_text():
    # Kafka's header values are bytes (CloudEvents' ce_id among them): the
    # id was stored as "b'c'", another id than the structured event's "c".
    assert message_id_from({"ce_id": b"c"}) == "c"
    assert message_id_from({"once-message-id": bytearray(b"a")}) == "a"

    assert not apply("stock", b"m1").duplicate
    assert apply("stock", "m1").duplicate
    assert InboxMessage.objects.get().message_id == "m1"

    with pytest.raises(MessageIdInvalid), receive("stock", b"\xff"):
        raise AssertionError("must not run")


def test_consumer_on_a_plain_callable_reads_the_outbox_header():
    calls = []

    @consumer("stock")
    def on_order(*, payload, headers):
        calls.append(payload)
        return "done"

    headers = {"once-message-id": "m1"}
    assert on_order(payload={"n": 1}, headers=headers) == "done"
    assert on_order(payload={"n": 1}, headers=headers) is None
    assert calls == [{"n": 1}]
    assert on_order.subscriber == "stock"


def test_consumer_with_an_explicit_message_id():
    calls = []

    @consumer("stock", message_id="event_id")
    def by_kwarg(*, event_id):
        calls.append(event_id)

    @consumer("mailer", message_id=lambda event: event["key"])
    def by_function(event):
        calls.append(event["key"])

    by_kwarg(event_id="e1")
    by_kwarg(event_id="e1")
    by_function({"key": "e1"})
    by_function({"key": "e1"})
    assert calls == ["e1", "e1"]  # once per subscriber


@pytest.mark.parametrize("steps", [False, True])
def test_an_async_or_generator_consumer_is_refused_where_it_is_defined(steps):
    # Called in the claim's transaction, it would return a coroutine or a
    # generator whose body never runs: the message applied, nothing done.
    async def notify(message_id):
        Widget.objects.create(name=message_id)

    def lazy(message_id):
        yield Widget.objects.create(name=message_id)

    for func, word in ((notify, "async"), (lazy, "generator")):
        with pytest.raises(ImproperlyConfigured, match=word):
            consumer("mailer", message_id="message_id", steps=steps)(func)


def test_a_consumer_over_a_celery_task_is_refused_where_it_is_defined():
    # The decorators the wrong way round: the worker runs the task Celery
    # registered, the bare function, and applies every redelivery again.
    from celery import Celery

    from inbox.api import ConsumerTask

    app = Celery(set_as_current=False)

    def ship(**kwargs):
        Widget.objects.create(name="shipped")

    task = app.task(name="inbox_tests.ship", base=ConsumerTask)(ship)

    with pytest.raises(ImproperlyConfigured, match="under @shared_task"):
        consumer("shipping")(task)


def test_a_consumer_over_a_consumer_of_its_subscriber_is_refused():
    # consumer_task over a function still under its own @consumer: the inner
    # claim found the outer one's row and took every message for a duplicate,
    # so the message was marked applied and nothing ran.
    @consumer("shipping", message_id="message_id")
    def ship(message_id):
        Widget.objects.create(name=message_id)

    with pytest.raises(ImproperlyConfigured, match="a consumer of 'shipping'"):
        consumer("shipping", message_id="message_id")(ship)


def test_a_second_consumer_task_of_a_taken_name_is_refused_naming_both(
    consumer_tasks,
):
    # Celery kept the first task of a name and handed it to the second
    # decorator: the second consumer's messages ran the first one's code.
    @consumer_task("stock", name="inbox_tests.taken")
    def reserve(**kwargs): ...

    def ship(**kwargs): ...

    with pytest.raises(ImproperlyConfigured) as refused:
        consumer_task("shipping", name="inbox_tests.taken")(ship)

    message = str(refused.value)
    assert "'inbox_tests.taken'" in message
    assert f"{__name__}.{reserve.__qualname__}" in message
    assert f"{__name__}.{ship.__qualname__}" in message


def test_the_same_consumer_task_defined_again_is_not_refused(consumer_tasks):
    # A module imported twice defines the same function again.
    def define():
        @consumer_task("stock", name="inbox_tests.defined_twice")
        def reserve(**kwargs): ...

        return reserve

    assert define().name == define().name == "inbox_tests.defined_twice"


def test_a_consumer_returning_an_awaitable_is_rolled_back_and_runs_again():
    async def notify(message_id):
        Widget.objects.create(name=message_id)

    @consumer("mailer", message_id="message_id")
    def handle(message_id):
        return notify(message_id)

    with pytest.raises(ImproperlyConfigured, match="awaitable"):
        handle(message_id="m1")
    assert not InboxMessage.objects.exists()  # a redelivery runs it again


def test_an_id_of_zero_is_an_id():
    # A sequence's first message, numbered 0, was refused as having no id
    # (a ConsumerTask buried it at once, dead).
    calls = []

    @consumer("ledger", message_id=lambda event: event["seq"])
    def by_sequence(event):
        calls.append(event["seq"])

    by_sequence({"seq": 0})
    by_sequence({"seq": 0})
    by_sequence({"seq": 1})
    assert calls == [0, 1]
    assert message_id_from({"once-message-id": 0}) == "0"
    assert not apply("stock", 0).duplicate
    assert sorted(InboxMessage.objects.values_list("message_id", flat=True)) == [
        "0",
        "0",
        "1",
    ]


def test_consumer_refuses_a_delivery_without_an_id():
    @consumer("stock")
    def handler(**kwargs):
        raise AssertionError("must not run")

    with pytest.raises(MessageIdMissing):
        handler(payload={})


def test_a_consumer_that_dies_before_the_ack_gets_a_detected_redelivery():
    """Commit, die before ack: RabbitMQ redelivers; the inbox drops it."""
    name = f"outbox-test-inbox-{uuid.uuid4().hex[:8]}"
    exchange = Exchange(name, type="direct", durable=False, auto_delete=True)
    queue = Queue(name, exchange, routing_key=name, auto_delete=False)
    effects = []

    @consumer(
        "stock", message_id=lambda body, message: message.properties["message_id"]
    )
    def handle(body, message):
        effects.append(body["order"])

    with Connection(AMQP_URL) as conn:
        conn.Producer().publish(
            {"order": 1},
            exchange=exchange,
            routing_key=name,
            message_id="m-42",
            declare=[queue],
        )
    try:
        # First worker: handles (commits), then its connection dies unacked.
        crashed = Connection(AMQP_URL)
        message = crashed.SimpleQueue(queue).get(timeout=5)
        handle(message.payload, message)
        crashed.close()  # no ack: the broker requeues it

        with Connection(AMQP_URL) as conn:
            simple = conn.SimpleQueue(queue)
            redelivered = simple.get(timeout=5)
            assert redelivered.delivery_info["redelivered"] is True
            assert handle(redelivered.payload, redelivered) is None  # duplicate
            redelivered.ack()
            assert simple.qsize() == 0
            simple.close()
    finally:
        with Connection(AMQP_URL) as conn:
            queue(conn.channel()).delete()

    assert effects == [1]
    assert InboxMessage.objects.get(message_id="m-42").duplicates == 1


@pytest.mark.parametrize(
    "message_id",
    ["x" * 256, "m\x001", "m-\ud800"],
    ids=["over-255-characters", "nul", "lone-surrogate"],
)
def test_an_id_the_column_cannot_hold_is_refused_before_any_transaction(message_id):
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(MessageIdInvalid),
        receive("stock", message_id),
    ):
        raise AssertionError("must not run")

    assert len(queries) == 0  # not a DataError halfway through the work
    assert InboxMessage.objects.count() == 0


# A blank id named every message that carried one: the first was applied,
# each later one skipped as its duplicate. An integer past the 4,300 digits
# Python turns into text raised a bare ValueError from receive().
REFUSED_IDS = pytest.mark.parametrize(
    "message_id", [" ", "\t\n", 10**5000], ids=["space", "whitespace", "huge-int"]
)


@REFUSED_IDS
def test_a_blank_or_endless_id_is_refused_before_any_transaction(message_id):
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(MessageIdInvalid),
        receive("stock", message_id),
    ):
        raise AssertionError("must not run")

    assert len(queries) == 0
    assert InboxMessage.objects.count() == 0


@REFUSED_IDS
def test_a_consumer_task_buries_a_blank_or_endless_id_at_once(tmp_path, message_id):
    from tests.inbox.consumers import flaky

    task_id = str(uuid.uuid4())
    result = flaky.apply(
        kwargs={
            "payload": {"runs": str(tmp_path / "runs")},
            "headers": {"once-message-id": message_id},
        },
        task_id=task_id,
    )

    assert result.state == "IGNORED"  # recorded dead, so acked
    row = InboxMessage.objects.dead().get()
    assert (row.message_id, row.attempts) == (task_id, 1)
    assert row.last_error.startswith("MessageIdInvalid(")
    assert Widget.objects.count() == 0


SUBSCRIBERS = pytest.mark.parametrize(
    "subscriber",
    ["s" * 256, "s\x001", "s-\ud800", 7, "s\x1f1"],
    ids=["over-255-characters", "nul", "lone-surrogate", "not-a-string", "separator"],
)


@SUBSCRIBERS
def test_a_subscriber_the_column_cannot_hold_is_refused_before_any_sql(subscriber):
    # It was a DataError in the middle of the caller's transaction.
    with transaction.atomic():
        Widget.objects.create(name="w")
        with (
            CaptureQueriesContext(connection) as queries,
            pytest.raises(SubscriberInvalid),
            receive(subscriber, "m1"),
        ):
            raise AssertionError("must not run")
        assert len(queries) == 0
        apply("stock", "m1")  # the caller's transaction goes on

    assert InboxMessage.objects.get().subscriber == "stock"


@SUBSCRIBERS
def test_a_steps_subscriber_the_column_cannot_hold_is_refused_before_any_sql(
    subscriber,
):
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(SubscriberInvalid),
        receive_steps(subscriber, "m1"),
    ):
        raise AssertionError("must not run")

    assert len(queries) == 0
    assert InboxMessage.objects.count() == 0


def test_a_consumer_whose_subscriber_cannot_be_stored_is_refused_when_defined():
    with pytest.raises(SubscriberInvalid, match="at most 255"):
        consumer("s" * 256)


def test_the_longest_id_the_column_holds_is_kept():
    with receive("stock", "x" * 255) as delivery:
        assert not delivery.duplicate
    assert InboxMessage.objects.get().message_id == "x" * 255


def test_a_dead_message_is_taken_over_by_its_next_delivery_then_deduplicated():
    InboxMessage.objects.bury(
        "stock",
        "m1",
        timezone.now() - timedelta(days=3),
        attempts=5,
        error="RuntimeError()",
        redrive=None,
        using="default",
    )

    assert not apply("stock", "m1").duplicate  # nothing was applied: it runs
    assert apply("stock", "m1").duplicate
    row = InboxMessage.objects.get()
    assert (row.state, row.duplicates, row.attempts) == ("applied", 1, 5)
    assert row.received_at > timezone.now() - timedelta(minutes=1)  # kept from now


def test_burying_never_turns_an_applied_message_dead():
    apply("stock", "m1")
    InboxMessage.objects.bury(
        "stock",
        "m1",
        timezone.now(),
        attempts=5,
        error="late",
        redrive=None,
        using="default",
    )

    row = InboxMessage.objects.get()
    assert (row.state, row.last_error) == ("applied", "")


@pytest.mark.parametrize(
    "payload", [{"note": "a\x00b"}, {"note": "\ud800"}], ids=["nul", "lone-surrogate"]
)
def test_a_message_whose_arguments_jsonb_refuses_is_buried_without_a_redrive(
    tmp_path, payload
):
    # Its redrive could not be stored: burying it failed, and the message
    # was requeued, ran and failed again, for ever.
    from inbox.conf import inbox_settings
    from tests.inbox.consumers import flaky

    result = flaky.apply(
        kwargs={
            "payload": {"runs": str(tmp_path / "runs"), "failures": 9, **payload},
            "headers": {"once-message-id": "m-refused"},
        },
        task_id=str(uuid.uuid4()),
        retries=inbox_settings.MAX_ATTEMPTS - 1,
    )

    assert result.state == "IGNORED"  # recorded dead, so acked
    row = InboxMessage.objects.dead().get()
    assert (row.message_id, row.redrive) == ("m-refused", None)


def test_a_message_whose_id_lookup_raises_is_buried_under_its_task_id():
    # message_id= read a field the message lacks: burying it raised the
    # same KeyError, and the message was requeued and ran again, for ever.
    from inbox.conf import inbox_settings
    from tests.inbox.consumers import by_event_id

    task_id = str(uuid.uuid4())
    result = by_event_id.apply(
        kwargs={"payload": {}, "headers": {}},
        task_id=task_id,
        retries=inbox_settings.MAX_ATTEMPTS - 1,
    )

    assert result.state == "IGNORED"  # recorded dead, so acked
    row = InboxMessage.objects.dead().get()
    assert (row.subscriber, row.message_id) == ("inbox-tests.by-event-id", task_id)
    assert "KeyError('event_id')" in row.last_error
    assert row.redrive["id"] == task_id


@pytest.mark.parametrize("headers", ["once-message-id: m1", ["m1"], None])
def test_headers_that_are_no_mapping_carry_no_message_id(headers):
    assert message_id_from(headers) is None


def test_a_worker_taken_over_on_its_last_attempt_buries_nothing():
    # Its lease lapsed and a newer worker resumed the steps: the row is that
    # worker's. Buried, it was marked dead under the running steps.
    from inbox.conf import inbox_settings
    from tests.inbox.consumers import taken_over, taken_over_runs

    taken_over_runs.clear()
    taken_over.apply(
        kwargs={"payload": {}, "headers": {"once-message-id": "m-held"}},
        task_id=str(uuid.uuid4()),
        retries=inbox_settings.MAX_ATTEMPTS - 1,
    )

    assert taken_over_runs == ["m-held", "m-held"]  # retried, not buried
    assert not InboxMessage.objects.dead().exists()
    assert Widget.objects.get().name == "m-held"


def test_a_dead_message_routed_by_a_topic_key_is_replayed_to_its_queue(tmp_path):
    # Its replay went to a queue named after the routing key it came by
    # ("billing.invoice"), which Celery created and nobody consumes: the
    # operator saw it replayed, and the consumer never got it.
    from celery import current_app

    from inbox import ops
    from inbox.conf import inbox_settings
    from tests.inbox.consumers import flaky

    name = f"outbox-test-topic-{uuid.uuid4().hex[:8]}"
    exchange = Exchange(name, type="topic", durable=False, auto_delete=False)
    billing = Queue(name, exchange, routing_key="billing.#", auto_delete=False)
    stray = Queue("billing.invoice")  # where the replay went
    flaky.apply(
        kwargs={
            "payload": {"runs": str(tmp_path / "runs"), "failures": 9},
            "headers": {"once-message-id": "m-topic"},
        },
        task_id="t-topic",
        retries=inbox_settings.MAX_ATTEMPTS - 1,
        exchange=name,
        routing_key="billing.invoice",
    )
    row = InboxMessage.objects.dead().get(message_id="m-topic")

    with Connection(AMQP_URL) as conn:
        billing(conn.channel()).declare()
        simple = conn.SimpleQueue(billing)
        try:
            assert ops.replay([row], connection=conn) == [row]
            replayed = simple.get(timeout=5)
            assert replayed.headers["id"] == "t-topic"
            assert replayed.headers["task"] == "inbox_tests.flaky"
            replayed.ack()
        finally:
            simple.close()
            billing(conn.channel()).delete()
            exchange(conn.channel()).delete()
            stray(conn.channel()).delete()
    assert current_app.conf.task_create_missing_queues  # what made the stray


@pytest.mark.parametrize(
    "task_id", ["t" * 300, "t\x001"], ids=["over-255-characters", "nul"]
)
def test_a_foreign_task_whose_id_the_column_cannot_hold_is_buried_not_requeued(
    tmp_path, task_id
):
    # Another service's task with no message id header: its task id is the
    # message id, refused, and burying it under that same id raised a
    # DataError: the message was requeued and ran again, for ever.
    from tests.inbox.consumers import flaky

    def deliver():
        return flaky.apply(
            kwargs={"payload": {"runs": str(tmp_path / "runs")}, "headers": {}},
            task_id=task_id,
        )

    assert deliver().state == "IGNORED"  # recorded dead, so acked
    row = InboxMessage.objects.dead().get()
    assert row.subscriber == "inbox-tests.flaky"
    assert "MessageIdInvalid" in row.last_error
    assert deliver().state == "IGNORED"  # its redelivery finds the same row
    assert InboxMessage.objects.dead().get().pk == row.pk
    assert not (tmp_path / "runs").exists()  # the consumer never ran


class Opaque:
    """An object whose text is its address: another on each redelivery."""


@pytest.mark.parametrize(
    "message_id",
    [{"id": "m1"}, ["m1"], 1.5, True, Opaque()],
    ids=["mapping", "list", "float", "bool", "object"],
)
def test_an_id_that_is_no_text_bytes_integer_or_uuid_is_refused_before_any_sql(
    message_id,
):
    # Its text was taken as the id: an object's default text (its address)
    # differs on each redelivery, which was applied again.
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(MessageIdInvalid, match="text, bytes, an integer or a UUID"),
        receive("stock", message_id),
    ):
        raise AssertionError("must not run")

    assert len(queries) == 0
    assert InboxMessage.objects.count() == 0


def test_a_uuid_message_id_is_its_text():
    event = uuid.uuid4()
    assert not apply("stock", event).duplicate
    assert apply("stock", str(event)).duplicate


def test_a_foreign_message_whose_id_header_is_no_id_is_dead_at_once(tmp_path):
    from tests.inbox.consumers import flaky

    task_id = str(uuid.uuid4())
    result = flaky.apply(
        kwargs={
            "payload": {"runs": str(tmp_path / "runs")},
            "headers": {"once-message-id": {"value": "m1"}},
        },
        task_id=task_id,
    )

    assert result.state == "IGNORED"  # recorded dead, so acked
    row = InboxMessage.objects.dead().get()
    assert row.message_id == task_id
    assert "not dict" in row.last_error  # the reason, in the console
    assert not (tmp_path / "runs").exists()  # the consumer never ran


def test_a_consumer_tasks_retry_is_persistent_whatever_the_apps_default(
    monkeypatch,
):
    # Once a failed run is acked, its retry is the delivery's only copy on the
    # broker: sent transient (task_default_delivery_mode, a speed tuning), a
    # broker restart dropped it, and the event with it, with no inbox row.
    from celery.exceptions import Retry
    from kombu.messaging import Producer

    from tests.celery import app
    from tests.inbox.consumers import flaky

    sent = []
    monkeypatch.setattr(
        Producer, "publish", lambda self, body, **options: sent.append(options)
    )
    saved = app.conf.task_default_delivery_mode
    app.conf.task_default_delivery_mode = "transient"
    flaky.push_request(
        id=str(uuid.uuid4()),
        kwargs={"payload": {}, "headers": {}},
        delivery_info={"exchange": "", "routing_key": "celery"},
        called_directly=False,
        is_eager=False,
    )
    try:
        with pytest.raises(Retry):
            flaky.retry(exc=RuntimeError("flaky"), countdown=60)
    finally:
        flaky.pop_request()
        app.conf.task_default_delivery_mode = saved

    [options] = sent
    assert options["delivery_mode"] == 2
