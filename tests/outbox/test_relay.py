"""The relay: leased, fenced claims; backoff; dead letters; ordering."""

import threading
import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from kombu import Connection, Exchange, Queue

from idempotency.shared.storable import MAX_DEPTH
from outbox import relay, tasks
from outbox.api import record
from outbox.exceptions import PublishError
from outbox.models import OutboxMessage
from outbox.publishers import InMemoryPublisher
from tests.conftest import run_concurrently

from .conftest import DEAD_REDIS_URL, IN_MEMORY, REDIS_URL
from .test_api import nested

pytestmark = pytest.mark.django_db(transaction=True)


def test_drain_publishes_every_due_message_once_and_marks_it(sent, make_messages):
    messages = make_messages(25)

    result = relay.drain(batch_size=10)

    assert result.published == 25
    assert result.batches == 3
    assert sorted(m.id for m in sent) == sorted(str(m.id) for m in messages)
    assert all(m.headers["once-message-id"] == m.id for m in sent)
    assert OutboxMessage.objects.published().count() == 25
    row = OutboxMessage.objects.first()
    assert row.attempts == 1
    assert row.locked_until is None
    assert row.published_at is not None


def test_a_payload_nested_as_deep_as_record_allows_is_published(sent):
    # record() refuses deeper ones: the relay must read every one it keeps.
    with transaction.atomic():
        record("order", 1, "order.created", nested(MAX_DEPTH))

    assert relay.drain().published == 1
    assert sent[0].payload == nested(MAX_DEPTH)


def test_a_batch_is_written_back_in_one_fenced_statement(clock, make_messages):
    messages = make_messages(6)
    failing = {m.id for m in messages[::3]}

    class FailingSome(InMemoryPublisher):
        def publish(self, message):
            if message.id in failing:
                raise PublishError(f"no room for {message.id}")
            super().publish(message)

    batch = relay.claim(10)
    before = clock.now()
    with CaptureQueriesContext(connections["default"]) as queries:
        result = relay.publish_batch(batch, FailingSome(allow_in_memory=True))

    assert [q["sql"].split()[0] for q in queries] == ["UPDATE"]
    assert (result.published, result.failed, result.dead) == (4, 2, 0)
    for row in OutboxMessage.objects.all():
        if row.id in failing:
            assert (row.state, row.published_at) == ("pending", None)
            assert row.last_error == f"PublishError: no room for {row.id}"
            assert before <= row.available_at <= clock.now() + timedelta(seconds=2)
        else:
            assert (row.state, row.last_error) == ("published", "")
            assert before <= row.published_at <= clock.now()
        assert row.locked_until is None


@pytest.fixture
def server_side_binding():
    """The default connection with Django's ``server_side_binding`` option
    (make test's Django 6.x run sets it): a statement holds at most 65,535
    parameters."""
    connection = connections["default"]
    if connection.vendor != "postgresql":
        pytest.skip("server-side binding is PostgreSQL's")
    options = connection.settings_dict["OPTIONS"]
    before = options.get("server_side_binding")
    options["server_side_binding"] = True
    connection.close()
    yield
    options.pop("server_side_binding")
    if before is not None:
        options["server_side_binding"] = before
    connection.close()


@pytest.mark.usefixtures("steady_backoff")
def test_a_large_batch_that_fails_whole_is_written_back(
    server_side_binding, make_messages
):
    # A broker outage failing 10,000 messages of one batch: the write-back
    # needed some 70,000 parameters, failed, and left the batch leased, to go
    # out again after every lease with no error recorded.
    make_messages(10_000)

    class Down(InMemoryPublisher):
        def publish_many(self, messages):
            return {m.id: PublishError("the broker is down") for m in messages}

    batch = relay.claim(10_000)
    result = relay.publish_batch(batch, Down(allow_in_memory=True))

    assert (result.published, result.failed) == (0, 10_000)
    assert not OutboxMessage.objects.filter(locked_until__isnull=False).exists()
    assert not OutboxMessage.objects.filter(last_error="").exists()


@pytest.mark.usefixtures("steady_backoff")
def test_an_error_text_a_column_cannot_hold_is_stored_escaped_with_its_batch(
    sent, make_messages
):
    messages = make_messages(3)
    bad = messages[1].id

    class Garbled(InMemoryPublisher):
        def publish(self, message):
            if message.id == bad:
                raise PublishError("broker said \x00 and \ud800")
            super().publish(message)

    result = relay.drain(publisher=Garbled(allow_in_memory=True))

    assert (result.published, result.failed) == (2, 1)
    row = OutboxMessage.objects.get(pk=bad)
    assert (row.state, row.locked_until) == ("pending", None)
    assert row.last_error == "PublishError: broker said \\x00 and \\ud800"
    assert OutboxMessage.objects.published().count() == 2


class Answering(InMemoryPublisher):
    """Publishes nothing, and answers ``publish_many`` with ``answer(batch)``."""

    def __init__(self, answer):
        super().__init__(allow_in_memory=True)
        self.answer = answer

    def publish_many(self, messages):
        return self.answer(messages)


@pytest.mark.usefixtures("steady_backoff")
def test_a_refusal_keyed_by_the_message_id_as_text_counts(sent, make_messages):
    refused, kept = make_messages(2)
    publisher = Answering(lambda batch: {str(refused.id): PublishError("full")})

    result = relay.drain(publisher=publisher)

    assert (result.published, result.failed) == (1, 1)
    row = OutboxMessage.objects.get(pk=refused.id)
    assert (row.state, row.last_error) == ("pending", "PublishError: full")
    assert OutboxMessage.objects.get(pk=kept.id).state == "published"


@pytest.mark.usefixtures("steady_backoff")
def test_a_refusal_without_an_error_still_refuses(sent, make_messages):
    # {id: None} counted the refused message published.
    refused, kept = make_messages(2)
    publisher = Answering(lambda batch: {refused.id: None})

    result = relay.drain(publisher=publisher)

    assert (result.published, result.failed) == (1, 1)
    row = OutboxMessage.objects.get(pk=refused.id)
    assert row.state == "pending"
    assert "Answering.publish_many() refused it without an error" in row.last_error
    assert OutboxMessage.objects.get(pk=kept.id).state == "published"


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (lambda batch: {"not-an-id": PublishError("full")}, "names no message"),
        (lambda batch: {uuid.uuid4(): PublishError("full")}, "names no message"),
        (lambda batch: None, "returned NoneType, not a mapping"),
        (lambda batch: [m.id for m in batch], "returned list, not a mapping"),
    ],
    ids=["text", "another-id", "none", "list"],
)
@pytest.mark.usefixtures("steady_backoff")
def test_an_answer_naming_no_message_of_the_batch_fails_the_batch(
    answer, error, sent, make_messages
):
    make_messages(2)

    result = relay.drain(publisher=Answering(answer))

    assert (result.published, result.failed) == (0, 2)
    for row in OutboxMessage.objects.all():
        assert row.state == "pending"
        assert error in row.last_error
        assert "Answering.publish_many()" in row.last_error


def test_a_claim_leases_its_messages_until_the_lease_lapses(clock, make_messages):
    make_messages(3)

    first = relay.claim(10)
    assert [m.attempts for m in first] == [1, 1, 1]
    assert relay.claim(10) == []  # leased: another relay leaves them alone

    clock.advance(seconds=61)
    again = relay.claim(10)
    assert sorted(m.pk for m in again) == sorted(m.pk for m in first)
    assert [m.attempts for m in again] == [2, 2, 2]


@pytest.mark.postgresql
def test_no_row_is_locked_nor_transaction_open_while_the_broker_is_awaited(
    sent, make_messages
):
    # The claim commits before publishing: a broker that stalls must not hold
    # the rows (other relays, record() and the console's requeue would queue
    # behind it) nor an open transaction (idle in transaction, vacuum held).
    make_messages(3)
    seen = []

    def rows_free(_index):
        with transaction.atomic(), connections["default"].cursor() as cursor:
            # NOWAIT: a row the publishing relay still locked raises at once.
            cursor.execute("SELECT id FROM outbox_message FOR UPDATE NOWAIT")
            return len(cursor.fetchall())

    class Inspecting(InMemoryPublisher):
        def publish_many(self, messages):
            seen.append(
                (connections["default"].in_atomic_block, run_concurrently(1, rows_free))
            )
            return super().publish_many(messages)

    assert relay.drain(publisher=Inspecting(allow_in_memory=True)).published == 3
    assert seen == [(False, [3])]


def test_a_claimed_message_holds_its_row_as_the_claim_left_it(clock, make_messages):
    # The claim does not read back the lease it set: every field must still
    # equal the row's, none deferred to a query of its own.
    make_messages(3)
    before = clock.now()
    batch = relay.claim(10)
    lease = (before + timedelta(seconds=60), clock.now() + timedelta(seconds=60))
    rows = {row.pk: row for row in OutboxMessage.objects.all()}

    with CaptureQueriesContext(connections["default"]) as queries:
        for message in batch:
            assert message.get_deferred_fields() == set()
            for field in OutboxMessage._meta.concrete_fields:
                value = getattr(message, field.attname)
                assert value == getattr(rows[message.pk], field.attname), field.name
            assert lease[0] <= message.locked_until <= lease[1]
    assert len(queries) == 0


def test_a_relay_whose_lease_lapsed_cannot_overwrite_the_newer_claim(
    clock, make_messages
):
    make_messages(1)
    [stale] = relay.claim(1)
    clock.advance(seconds=61)
    [fresh] = relay.claim(1)
    # The newer claimant fails and backs off...
    assert relay.mark_failed(fresh, "broker said no") == "pending"

    # ...then the stale relay comes back and tries to report success.
    assert relay.mark_published([stale]) == 0
    assert relay.mark_failed(stale, "late") is None

    row = OutboxMessage.objects.get()
    assert row.state == "pending"
    assert row.attempts == 2
    assert row.last_error == "broker said no"


def test_a_failed_publish_backs_off_with_a_growing_ceiling(
    clock, monkeypatch, sent, make_messages
):
    monkeypatch.setattr(relay.random, "random", lambda: 1.0)  # the ceiling itself
    make_messages(1)
    InMemoryPublisher.failing = True
    delays = []
    for _ in range(4):
        start = clock.now()
        assert relay.drain().failed == 1
        row = OutboxMessage.objects.get()
        delays.append(row.available_at - start)
        assert relay.drain().batches == 0  # not due again before the backoff
        clock.advance(seconds=delays[-1].total_seconds() + 1)

    assert [round(d.total_seconds()) for d in delays] == [2, 4, 8, 16]
    assert row.attempts == 4
    assert "failing is set" in row.last_error


def test_full_jitter_draws_below_the_capped_ceiling(monkeypatch):
    monkeypatch.setattr(relay.random, "random", lambda: 0.25)
    assert relay.backoff(3) == timedelta(seconds=2)  # 0.25 x 8 s
    assert relay.backoff_ceiling(1) == timedelta(seconds=2)
    assert relay.backoff_ceiling(100) == timedelta(hours=1)


@override_settings(OUTBOX={"BACKOFF_BASE": 300, "BACKOFF_MAX": 3600})
def test_the_backoff_ceiling_stops_at_the_cap_for_any_attempt_count():
    # 300 s doubled 39 times is past timedelta's limit.
    for attempt in (5, 40, 100, 10**6):
        assert relay.backoff_ceiling(attempt) == timedelta(hours=1)
    assert relay.backoff_ceiling(4) == timedelta(seconds=2400)


@override_settings(
    OUTBOX={**IN_MEMORY, "MAX_ATTEMPTS": 100, "BACKOFF_BASE": 300, "BACKOFF_MAX": 3600}
)
def test_a_failure_late_in_a_long_outage_backs_off_beside_a_published_message(
    clock, sent, make_messages
):
    late, fresh = make_messages(2)
    OutboxMessage.objects.filter(pk=late.pk).update(attempts=39)

    class FailingLate(InMemoryPublisher):
        def publish(self, message):
            if message.id == late.id:
                raise PublishError("still down")
            super().publish(message)

    result = relay.drain(publisher=FailingLate(allow_in_memory=True))

    assert (result.published, result.failed) == (1, 1)
    assert OutboxMessage.objects.get(pk=fresh.pk).state == "published"
    row = OutboxMessage.objects.get(pk=late.pk)
    assert (row.state, row.locked_until) == ("pending", None)
    assert row.available_at <= clock.now() + timedelta(hours=1)


@override_settings(OUTBOX={**IN_MEMORY, "MAX_ATTEMPTS": 3})
def test_dead_after_max_attempts_and_a_requeue_brings_it_back(
    clock, sent, make_messages
):
    make_messages(1)
    InMemoryPublisher.failing = True
    for _ in range(3):
        relay.drain()
        clock.advance(hours=2)
    row = OutboxMessage.objects.get()
    assert (row.state, row.attempts) == ("dead", 3)
    assert relay.drain().batches == 0  # dead messages are not retried

    InMemoryPublisher.failing = False
    assert OutboxMessage.objects.requeue(clock.now()) == 1
    assert relay.drain().published == 1
    row.refresh_from_db()
    assert (row.state, row.attempts) == ("published", 4)  # attempts stay fenced


def test_a_message_whose_relays_keep_crashing_goes_dead(clock, sent, make_messages):
    make_messages(1)
    with override_settings(OUTBOX={**IN_MEMORY, "MAX_ATTEMPTS": 2}):
        for _ in range(2):
            relay.claim(1)  # the relay dies holding it
            clock.advance(seconds=61)
        assert relay.drain().dead == 1
    assert sent == []
    assert OutboxMessage.objects.get().state == "dead"


def test_unpublished_messages_never_expire(clock, sent, make_messages):
    make_messages(2)
    [dead] = relay.claim(1)
    OutboxMessage.objects.filter(pk=dead.pk).update(state="dead")
    clock.advance(days=365)

    assert OutboxMessage.objects.purgeable(clock.now(), timedelta(days=7)).count() == 0
    relay.drain()
    clock.advance(days=8)
    assert OutboxMessage.objects.purgeable(clock.now(), timedelta(days=7)).count() == 1


def test_lag_counts_from_when_the_message_became_due(
    clock, sent, make_messages, steady_backoff
):
    make_messages(1)
    InMemoryPublisher.failing = True
    relay.drain()  # backoff pushes available_at on
    clock.advance(minutes=10)

    age = OutboxMessage.objects.oldest_pending_age(clock.now())
    assert age >= timedelta(minutes=10)


def test_lag_is_never_below_zero_when_the_writers_clock_runs_ahead(clock):
    with transaction.atomic():
        record("order", 1, "order.created", {})
    clock.advance(seconds=-2)  # this host's clock

    assert OutboxMessage.objects.oldest_pending_age(clock.now()) == timedelta(0)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": -1}, "batch_size must be a positive integer"),
        ({"batch_size": "10"}, "batch_size must be a positive integer"),
        ({"batch_size": 2**63}, "batch_size must be at most 100,000"),
        ({"time_budget": 0}, "time_budget must be more than 0 s"),
        ({"time_budget": float("nan")}, "time_budget must be finite"),
        ({"time_budget": 1e300}, "time_budget must be"),
    ],
    ids=["zero", "negative", "text", "past-bigint", "no-budget", "nan", "huge"],
)
def test_drain_refuses_arguments_it_cannot_run_with_before_any_claim(
    sent, make_messages, arguments, error
):
    # They raised a DataError from the claim, "Negative indexing is not
    # supported" or an OverflowError; 0 quietly meant the setting.
    make_messages(1)

    with (
        CaptureQueriesContext(connections["default"]) as queries,
        pytest.raises(ValueError, match=error),
    ):
        relay.drain(**arguments)

    assert queries.captured_queries == []
    assert OutboxMessage.objects.get().attempts == 0
    assert sent == []


@override_settings(OUTBOX={"RELAY": "debezium"})
def test_the_celery_relay_stays_idle_in_debezium_mode(sent, make_messages):
    make_messages(1)
    assert relay.drain().batches == 0
    assert sent == []


def test_the_task_drains_through_the_same_function(sent, make_messages):
    make_messages(3)
    assert tasks.relay.name == "outbox.relay"
    assert tasks.relay()["published"] == 3


@override_settings(OUTBOX={**IN_MEMORY, "BATCH_SIZE": 1, "TIME_BUDGET": 1e-6})
def test_a_task_whose_budget_ran_out_sends_the_relay_on(
    sent, make_messages, eager_celery, monkeypatch
):
    # The commits that kicked it are over: without another task, the rest of
    # the backlog waited for the next commit, or beat if there was one.
    make_messages(3)
    sends = []
    real = tasks.relay.apply_async
    monkeypatch.setattr(
        tasks.relay,
        "apply_async",
        lambda *a, **kw: sends.append(kw.get("kwargs")) or real(*a, **kw),
    )

    tasks.relay()

    assert len(sent) == 3
    assert OutboxMessage.objects.pending().count() == 0
    # One per full batch whose budget ran out; none after the empty claim.
    assert sends == [None] * 3


@override_settings(OUTBOX={**IN_MEMORY, "BATCH_SIZE": 5, "TIME_BUDGET": 1e-6})
def test_a_partial_batch_past_the_budget_sends_no_relay_on(
    sent, make_messages, monkeypatch
):
    make_messages(3)
    sends = []
    monkeypatch.setattr(tasks.relay, "apply_async", lambda *a, **kw: sends.append(1))

    tasks.relay()

    assert len(sent) == 3
    assert sends == []


def test_broker_down_attempts_grow_nothing_lost_then_everything_flows(
    clock, steady_backoff
):
    exchange = Exchange("outbox-test-down", type="topic")
    queue = Queue("outbox-test-down", exchange, routing_key="order")
    down = {"url": DEAD_REDIS_URL, "exchange": "outbox-test-down"}
    up = {"url": REDIS_URL, "exchange": "outbox-test-down", "declare": (queue,)}
    with Connection(REDIS_URL) as conn:
        queue(conn.channel()).declare()
        queue(conn.channel()).purge()
    with transaction.atomic():
        ids = {str(record("order", i, "order.created", {"i": i})) for i in range(5)}

    with override_settings(OUTBOX={"PUBLISHER_OPTIONS": down, "MAX_ATTEMPTS": 5}):
        for attempt in (1, 2, 3):
            result = relay.drain()
            assert (result.published, result.failed) == (0, 5)
            rows = list(OutboxMessage.objects.all())
            assert {r.attempts for r in rows} == {attempt}
            assert all(r.state == "pending" for r in rows)
            assert all("PublishError" in r.last_error for r in rows)
            ceiling = relay.backoff_ceiling(attempt)
            assert all(r.available_at <= clock.now() + ceiling for r in rows)
            clock.advance(seconds=ceiling.total_seconds())

    with override_settings(OUTBOX={"PUBLISHER_OPTIONS": up}):
        assert relay.drain().published == 5
    received = set()
    with Connection(REDIS_URL) as conn:
        simple = conn.SimpleQueue(queue)
        while len(received) < 5:
            message = simple.get(timeout=5)
            received.add(message.properties["message_id"])
            message.ack()
        simple.close()
    assert received == ids
    assert OutboxMessage.objects.published().count() == 5


@pytest.mark.postgresql
def test_three_relays_drain_5000_messages_without_double_claims(
    make_messages, isolation_level
):
    make_messages(5000)
    claims = Counter()
    lock = threading.Lock()

    class Recording(InMemoryPublisher):
        def publish(self, message):
            with lock:
                claims[(message.pk, message.attempts)] += 1

    def run(index):
        time.sleep(0)
        return relay.drain(batch_size=100, publisher=Recording(allow_in_memory=True))

    results = run_concurrently(3, run, timeout=120)

    assert sum(r.published for r in results) == 5000
    assert all(r.published > 0 for r in results)  # they really ran side by side
    assert len(claims) == 5000  # every message published ...
    assert set(claims.values()) == {1}  # ... by exactly one live claimant
    assert OutboxMessage.objects.published().count() == 5000


@pytest.mark.postgresql
@override_settings(OUTBOX={**IN_MEMORY, "ORDERED": True})
def test_per_aggregate_order_holds_when_commits_come_out_of_order(sent):
    second_done = threading.Event()

    def second_writer():
        try:
            with transaction.atomic():
                record("order", 42, "order.shipped", {"step": 2})
            second_done.set()
        finally:
            connections.close_all()

    with transaction.atomic():
        record("order", 42, "order.created", {"step": 1})
        # A later transaction on the same aggregate tries to commit first.
        writer = threading.Thread(target=second_writer)
        writer.start()
        # It is held until this one commits; the relay sees nothing yet.
        assert not second_done.wait(0.5)
        publish_while_open = threading.Thread(target=_drain_in_thread)
        publish_while_open.start()
        publish_while_open.join(10)
        assert sent == []
    writer.join(10)
    assert second_done.is_set()
    relay.drain()
    relay.drain()

    assert [m.payload["step"] for m in sent] == [1, 2]


@override_settings(OUTBOX={**IN_MEMORY, "ORDERED": True})
def test_per_aggregate_order_holds_when_the_next_writers_clock_is_behind(clock, sent):
    # Two hosts: the second writer of the aggregate reads a clock 2 s behind
    # the first's. The relay publishes in created_at order.
    with transaction.atomic():
        record("order", 42, "order.created", {"step": 1})
    clock.advance(seconds=-2)
    with transaction.atomic():
        record("order", 42, "order.shipped", {"step": 2})
        record("order", 7, "order.created", {"step": 1})  # another aggregate
    clock.advance(seconds=3)
    relay.drain()
    relay.drain()

    assert [m.payload["step"] for m in sent if m.aggregate_id == "42"] == [1, 2]
    first = OutboxMessage.objects.get(aggregateid="42", type="order.created")
    other = OutboxMessage.objects.get(aggregateid="7")
    assert other.created_at < first.created_at  # the other kept its own clock


def test_a_kicked_relay_whose_clock_is_behind_the_writers_publishes_the_event(
    clock, sent
):
    with transaction.atomic():  # on the web host
        record("order", 1, "order.created", {})
    clock.advance(seconds=-0.005)  # the worker host's clock is 5 ms behind

    result = relay.drain()  # the relay the commit kicked

    assert result.published == 1
    assert OutboxMessage.objects.get().state == "published"


def _drain_in_thread():
    try:
        relay.drain()
    finally:
        connections.close_all()


@pytest.mark.postgresql
@override_settings(OUTBOX={**IN_MEMORY, "ORDERED": True})
def test_ordered_mode_holds_a_message_while_an_older_one_is_unpublished(
    clock, sent, steady_backoff
):
    with transaction.atomic():
        record("order", 1, "order.created", {"step": 1})
    clock.advance(seconds=1)
    with transaction.atomic():
        record("order", 1, "order.paid", {"step": 2})
        record("order", 2, "order.created", {"step": 1})
    InMemoryPublisher.failing = True

    assert relay.drain().failed == 2  # the heads of aggregates 1 and 2 fail
    # While the head backs off, its successor is not even claimed.
    assert OutboxMessage.objects.get(type="order.paid").attempts == 0
    InMemoryPublisher.failing = False
    clock.advance(hours=2)
    relay.drain()

    order_1 = [m.payload["step"] for m in sent if m.aggregate_id == "1"]
    assert order_1 == [1, 2]


def test_the_claim_takes_exactly_the_messages_the_queryset_calls_claimable(clock):
    # The relay's claim is built on OutboxMessage.objects.claimable(now): the
    # console and the relay cannot disagree on what a relay may take.
    now = clock.now()
    later, earlier = now + timedelta(minutes=5), now - timedelta(minutes=5)
    rows = {
        "due": {},
        "due, lease lapsed": {"locked_until": earlier},
        "not due yet": {"available_at": later},
        "leased": {"locked_until": later},
        "published": {"state": "published", "published_at": earlier},
        "dead": {"state": "dead"},
    }
    ids = {
        name: OutboxMessage.objects.create(
            aggregatetype="order",
            aggregateid=name,
            type="order.created",
            payload={},
            **{"created_at": earlier, "available_at": earlier, **fields},
        ).id
        for name, fields in rows.items()
    }
    claimable = set(OutboxMessage.objects.claimable(now).values_list("id", flat=True))

    claimed = {message.id for message in relay.claim(10)}

    assert claimed == claimable == {ids["due"], ids["due, lease lapsed"]}
