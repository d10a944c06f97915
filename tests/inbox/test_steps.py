"""The inbox's steps consumer: its claim commits first with a lease, a
redelivery resumes at the first unfinished step, and giving up compensates."""

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from datetime import timedelta

import pytest
from django.db import connections, transaction
from kombu import Connection

from idempotency.shared import clock as shared_clock
from idempotency.shared import units
from idempotency.shared.steps import Abandon, StepInTransaction, StepTakenOver
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.testing.clock import controlled_clock
from idempotency.shared.testing.crashes import SimulatedCrash
from idempotency.shared.testing.steps import step_kills
from inbox import ops
from inbox.api import receive, receive_steps
from inbox.conf import inbox_settings
from inbox.exceptions import DeliveryBusy, StepsNotClaimed
from inbox.models import InboxMessage
from inbox.querysets import BUSY
from outbox.api import record
from outbox.models import OutboxMessage
from tests.conftest import run_concurrently
from tests.parallel import on_threads, together
from tests.signals import listening

pytestmark = pytest.mark.django_db(transaction=True)

calls: list[str] = []


@pytest.fixture(autouse=True)
def _calls():
    calls.clear()


def called(name):
    def fn(key):
        calls.append(name)
        return {"step": name, "key": key}

    return fn


def undo_step(key, result):
    calls.append(f"undo {result['step']}")


def consume(message_id, *, abandon=False, fail=False, last_attempt=False):
    with receive_steps("shipping", message_id, last_attempt=last_attempt) as d:
        if d.duplicate:
            return "duplicate"
        d.step("book", called("book"), undo=undo_step)
        d.step("label", called("label"), undo=undo_step)
        if abandon:
            raise Abandon("the order was cancelled")
        if fail:
            raise RuntimeError("the mailer is down")
        d.step("mail", called("mail"))
        return "applied"


def row(message_id="m1"):
    return InboxMessage.objects.get(subscriber="shipping", message_id=message_id)


def test_the_claim_commits_before_the_first_step_runs():
    seen = []

    def look(key):
        # Another connection, as another worker would see it.
        thread = threading.Thread(
            target=lambda: seen.append(
                InboxMessage.objects.filter(state="running").count()
            )
        )
        thread.start()
        thread.join()
        return None

    with receive_steps("shipping", "m1") as delivery:
        delivery.step("look", look)

    assert seen == [1]
    assert row().state == InboxMessage.State.APPLIED
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE


def test_a_redelivery_after_a_crash_resumes_at_the_first_unfinished_step():
    with step_kills(kill_after=1), suppress(SimulatedCrash):
        consume("m1")
    assert calls == ["book"]
    assert row().state == InboxMessage.State.RUNNING

    with controlled_clock() as clock:
        clock.advance(inbox_settings.STEPS_LEASE + timedelta(seconds=1))
        assert consume("m1") == "applied"

    assert calls == ["book", "label", "mail"]  # book ran once
    assert consume("m1") == "duplicate"
    assert row().duplicates == 1


def test_a_redelivery_under_a_live_lease_is_busy_not_dropped():
    with step_kills(kill_after=1), suppress(SimulatedCrash):
        consume("m1")

    with pytest.raises(DeliveryBusy):
        consume("m1")
    assert row().duplicates == 0
    assert calls == ["book"]


def test_a_failed_run_lets_its_lease_go_and_its_retry_resumes():
    with pytest.raises(RuntimeError):
        consume("m1", fail=True)
    assert consume("m1") == "applied"
    assert calls == ["book", "label", "mail"]


def newer_worker(stack):
    """Take the delivery over as a redelivery would; its block stays open
    until ``stack`` closes. Here two workers' blocks interleave in one
    thread, so it runs in a context of its own: the current unit it sets
    must not outlive it in the test's."""
    context = contextvars.copy_context()
    block = receive_steps("shipping", "m1")
    delivery = context.run(block.__enter__)
    stack.callback(context.run, block.__exit__, None, None, None)
    return delivery


def times_out(key):
    raise RuntimeError("the carrier timed out")


@pytest.mark.parametrize(
    ("wakes_to", "raised"),
    [(called("label"), StepTakenOver), (times_out, RuntimeError)],
    ids=["its-recovery-point-is-fenced-out", "its-call-fails"],
)
def test_a_worker_taken_over_mid_steps_leaves_the_newer_workers_lease_alone(
    clock, wakes_to, raised
):
    with ExitStack() as newer_block:
        with pytest.raises(raised), receive_steps("shipping", "m1") as first:
            first.step("book", called("book"))
            # Its lease lapses mid-call, and a redelivery takes it over.
            clock.advance(inbox_settings.STEPS_LEASE + timedelta(seconds=1))
            newer = newer_worker(newer_block)
            lease = row().locked_until
            first.step("label", wakes_to)  # it wakes: its block ends

        assert row().locked_until == lease
        with pytest.raises(DeliveryBusy):
            consume("m1")  # a third copy waits for the newer worker
        newer.step("label", called("label"))
    assert row().state == InboxMessage.State.APPLIED


def test_a_last_attempt_taken_over_leaves_the_unit_to_the_newer_worker(clock):
    past_a_lease = inbox_settings.STEPS_LEASE + timedelta(seconds=1)
    with ExitStack() as newer_block:
        with (
            pytest.raises(StepTakenOver),
            receive_steps("shipping", "m1", last_attempt=True) as first,
        ):
            first.step("book", called("book"), undo=undo_step)
            clock.advance(past_a_lease)
            newer_worker(newer_block)
            clock.advance(past_a_lease)  # the newer worker is slow too
            first.step("label", called("label"))

        assert calls == ["book", "label"]  # nothing undone
        assert UnitRecord.objects.get().state == UnitRecord.State.RUNNING


def another_worker_claims(clock):
    """Let the lease lapse and claim the delivery as another worker would;
    return its lease. Its unit has not begun, so the first worker's next
    recovery point is still stored."""
    lease = inbox_settings.STEPS_LEASE
    clock.advance(lease + timedelta(seconds=1))
    InboxMessage.objects.claim_running(
        "shipping", "m1", shared_clock.now(), lease, using="default"
    )
    return row().locked_until


def test_a_worker_whose_lapsed_lease_another_took_stops_at_its_renewal(clock):
    with pytest.raises(StepTakenOver), receive_steps("shipping", "m1") as first:
        taken = another_worker_claims(clock)
        first.step("book", called("book"))
        first.step("label", called("label"))

    assert calls == ["book"]
    assert row().locked_until == taken


# Threads racing one row: SQLite locks the whole table instead.
@pytest.mark.postgresql
def test_racing_claims_of_a_lapsed_lease_let_one_worker_take_it():
    with step_kills(kill_after=1), suppress(SimulatedCrash):
        consume("m1")
    later = shared_clock.now() + inbox_settings.STEPS_LEASE + timedelta(seconds=1)
    lease = inbox_settings.STEPS_LEASE

    def claim(index):
        return InboxMessage.objects.claim_running(
            "shipping", "m1", later, lease, using="default"
        )

    outcomes = run_concurrently(4, claim)

    assert sorted(outcomes) == [BUSY, BUSY, BUSY, "running"]


# Threads on one row: SQLite locks the whole table instead.
@pytest.mark.postgresql
def test_steps_on_threads_renewing_the_lease_at_once_are_not_taken_over(
    clock, monkeypatch
):
    """The docs let a consumer run its steps on worker threads. Two recovery
    points stored at once, a renewal due: each renews the delivery's lease,
    and the second must not take its sibling's renewal (the row's lease no
    longer the one it read) for another worker's takeover."""
    from inbox.querysets import InboxMessageManager

    renew = InboxMessageManager.renew
    monkeypatch.setattr(InboxMessageManager, "renew", together(renew))

    with receive_steps("shipping", "m1") as delivery:
        clock.advance(inbox_settings.STEPS_LEASE * 0.6)  # a renewal is due
        outcomes = on_threads(
            lambda: delivery.step("book", called("book")),
            lambda: delivery.step("label", called("label")),
        )

    assert not [exc for exc in outcomes if isinstance(exc, Exception)], outcomes
    assert sorted(calls) == ["book", "label"]
    assert row().state == InboxMessage.State.APPLIED
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE


@pytest.mark.postgresql
def test_steps_on_threads_of_a_worker_whose_lease_another_took_are_all_fenced(
    clock,
):
    with pytest.raises(StepTakenOver), receive_steps("shipping", "m1") as first:
        taken = another_worker_claims(clock)
        outcomes = on_threads(
            lambda: first.step("book", called("book")),
            lambda: first.step("label", called("label")),
        )
        assert [type(outcome) for outcome in outcomes] == [StepTakenOver] * 2
        raise outcomes[0]

    assert row().locked_until == taken  # the newer worker's, left alone
    assert row().state == InboxMessage.State.RUNNING


def test_a_step_on_a_thread_outliving_its_consumer_is_refused_before_its_call():
    # Misuse: the consumer left a worker thread running; its block ended and
    # the delivery is applied. The thread's step must not call out.
    late = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        with receive_steps("shipping", "m1") as delivery:
            delivery.step("book", called("book"))

            def straggle():
                late.wait(10)
                try:
                    return delivery.step("label", called("label"))
                finally:
                    connections.close_all()

            straggler = pool.submit(straggle)
        late.set()
        with pytest.raises(StepTakenOver, match="finished"):
            straggler.result(10)

    assert calls == ["book"]
    assert row().state == InboxMessage.State.APPLIED


def test_abandon_compensates_in_reverse_once_and_applies_the_delivery():
    assert consume("m1", abandon=True) is None
    assert calls == ["book", "label", "undo label", "undo book"]
    assert row().state == InboxMessage.State.APPLIED
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED

    assert consume("m1", abandon=True) == "duplicate"
    assert calls == ["book", "label", "undo label", "undo book"]


def test_an_abandon_is_sent_and_logged_as_the_consumer_giving_its_message_up(
    caplog,
):
    # docs/observability.md: message_abandoned is "a consumer gave its
    # message up (it raised Abandon)": a steps consumer is one too.
    with listening() as heard:
        consume("m1", abandon=True)

    [logged] = [r for r in caplog.records if r.name == "inbox"]
    assert (logged.levelname, logged.reason) == ("WARNING", "the order was cancelled")

    assert heard.of("message_abandoned") == [
        {
            "subscriber": "shipping",
            "message_id": "m1",
            "reason": "the order was cancelled",
        }
    ]
    assert heard.of("message_received") == []


def test_a_step_that_raises_abandon_gives_the_unit_up_and_undoes_the_others():
    # DESIGN: a unit gives up when "a step raises Abandon", not only its body.
    def refuse(key):
        calls.append("risk check")
        raise Abandon("the risk check refused it")

    with receive_steps("shipping", "m1") as delivery:
        delivery.step("book", called("book"), undo=undo_step)
        delivery.step("risk", refuse, undo=undo_step)
        delivery.step("mail", called("mail"))

    assert calls == ["book", "risk check", "undo book"]
    unit = UnitRecord.objects.get()
    assert (unit.state, unit.reason) == ("compensated", "the risk check refused it")
    assert row().state == InboxMessage.State.APPLIED
    assert consume("m1") == "duplicate"


def cancel_and_record(key, result):
    with transaction.atomic():
        record("booking", 1, "booking.cancelled", {})


@pytest.mark.parametrize("gives_up", ["abandon", "last-attempt-fails"])
def test_an_undo_records_its_events_under_the_intent_the_message_carried(gives_up):
    carried = units.Unit(units.KEYS, ("user:1", "order.create", "k")).intent

    with (
        suppress(RuntimeError),
        receive_steps("shipping", "m1", intent=carried, last_attempt=True) as delivery,
    ):
        delivery.step("book", called("book"), undo=cancel_and_record)
        if gives_up == "abandon":
            raise Abandon("the order was cancelled")
        raise RuntimeError("the carrier is down")

    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED
    # Three hops on, the cancellation still names the request's intent.
    assert OutboxMessage.objects.get().headers["once-intent"] == carried


def test_the_last_attempt_that_fails_gives_the_unit_up():
    with pytest.raises(RuntimeError):
        consume("m1", fail=True, last_attempt=True)

    assert calls == ["book", "label", "undo label", "undo book"]
    unit = UnitRecord.objects.get()
    assert unit.state == UnitRecord.State.COMPENSATED
    assert "attempts ran out" in unit.reason


def test_a_dead_message_whose_unit_gave_up_is_not_replayed():
    # Its last attempt compensated its steps, then ConsumerTask buried it.
    with pytest.raises(RuntimeError):
        consume("m1", fail=True, last_attempt=True)
    redrive = {"task": "shipping", "id": "m1", "args": [], "kwargs": {}}
    InboxMessage.objects.bury(
        "shipping",
        "m1",
        shared_clock.now(),
        attempts=3,
        error="RuntimeError('the mailer is down')",
        redrive={**redrive, "headers": {}, "queue": None},
        using="default",
    )
    calls.clear()

    # A replay would find every step abandoned and mark it applied with
    # nothing applied: the console leaves it dead instead.
    with Connection("memory://") as connection:
        assert ops.replay([row()], connection=connection) == []
    assert row().state == InboxMessage.State.DEAD
    assert consume("m1") is None  # what the replay's run would have done
    assert calls == []


def test_a_step_of_a_delivery_claimed_in_one_transaction_is_refused():
    with receive("shipping", "m1") as delivery, pytest.raises(StepsNotClaimed):
        delivery.step("book", called("book"))
    assert calls == []


def test_steps_are_refused_inside_an_open_transaction():
    with transaction.atomic(), pytest.raises(StepInTransaction):
        consume("m1")
    assert not InboxMessage.objects.exists()


def test_a_steps_consumer_on_another_database_runs_its_atomic_steps_there(
    other_alias,
):
    """receive_steps(using=...) claims the message there; its unit and each
    atomic step's transaction must be there too, or the step's local write
    commits on its own while its recovery point rolls back."""
    from tests.testapp.models import Widget

    def reserve(key):
        Widget.objects.using(other_alias).create(name=key)
        raise RuntimeError("the stock service is down")

    with (
        pytest.raises(RuntimeError),
        receive_steps("shipping", "m1", using=other_alias) as delivery,
    ):
        delivery.step("reserve", reserve, atomic=True)

    assert not Widget.objects.using(other_alias).exists()


@pytest.mark.postgresql
def test_a_steps_consumer_on_another_database_writes_its_unit_only_there(
    other_alias, reads_from_a_replica
):
    """receive_steps(using=...) under a router that sends writes to "default":
    each of the unit's writes goes where the caller said, not where the
    router sends them (on another server, a row that is not there; here,
    on the same one, a wait on the other alias's own uncommitted row)."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    default = connections["default"]
    with default.cursor() as cursor:
        cursor.execute("SET lock_timeout = '2s'")  # fail, not hang, on that wait
    try:
        with (
            CaptureQueriesContext(default) as on_default,
            receive_steps("shipping", "m1", using=other_alias) as delivery,
        ):
            delivery.step("book", called("book"), undo=undo_step)
            raise Abandon("the order was cancelled")
    finally:
        with default.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

    table = UnitRecord._meta.db_table
    assert [q["sql"] for q in on_default.captured_queries if table in q["sql"]] == []
    unit = UnitRecord.objects.using(other_alias).get()
    assert (unit.state, calls) == ("compensated", ["book", "undo book"])


def test_a_worker_that_stalls_before_its_unit_begins_leaves_an_applied_one_alone(
    clock, monkeypatch
):
    """A worker claims the delivery, then stalls past its lease before its
    unit begins; a redelivery takes it over and applies it. The stalled
    worker must not join the finished unit when it wakes: its last attempt
    failing would then undo the steps of an applied delivery."""
    from inbox import api

    begin = api.begin
    stalled = []

    def stalling_begin(*args, **kwargs):
        if not stalled:
            stalled.append(True)
            clock.advance(inbox_settings.STEPS_LEASE + timedelta(seconds=1))
            assert consume("m1") == "applied"  # the redelivery, meanwhile
        return begin(*args, **kwargs)

    monkeypatch.setattr(api, "begin", stalling_begin)

    with pytest.raises(StepTakenOver):
        consume("m1", fail=True, last_attempt=True)

    assert calls == ["book", "label", "mail"]  # nothing undone
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE
    assert row().state == InboxMessage.State.APPLIED


def test_a_renewal_rolled_back_with_the_callers_transaction_keeps_the_lease(clock):
    # An atomic step inside the consumer's own transaction renewed the lease
    # there; that transaction rolled back, and the lease with it. The worker
    # still holds the delivery: its next step must not find it taken over.
    class Undone(Exception):
        pass

    lease = inbox_settings.STEPS_LEASE
    with receive_steps("shipping", "m1") as delivery:
        delivery.step("book", called("book"))
        clock.advance(lease * 0.6)  # a renewal is due
        with suppress(Undone), transaction.atomic():
            delivery.step("note", called("note"), atomic=True)
            raise Undone
        clock.advance(lease * 0.3)  # each step well within half a lease
        delivery.step("label", called("label"))
        clock.advance(lease * 0.3)  # past the claim's lease: renewed since?
        delivery.step("mail", called("mail"))
    assert calls == ["book", "note", "label", "mail"]
    assert row().state == "applied"


carrier = {"down": False}


def cancel_booking(key, result):
    if carrier["down"]:
        raise ConnectionError("the carrier is down")
    calls.append(f"cancel {result['step']}")


def test_a_redelivery_that_calls_no_step_still_runs_the_undos_its_unit_owes(clock):
    # The first delivery gave up, and its undo raised: the unit stays
    # compensating. The redelivery's consumer finds nothing left to do and
    # calls no step: the retry still runs the remaining undos (docs/steps.md),
    # rather than mark the delivery applied with the booking never cancelled.
    from idempotency.shared.steps import CompensationFailed

    carrier["down"] = True
    with (
        pytest.raises(CompensationFailed),
        receive_steps("shipping", "m1") as delivery,
    ):
        delivery.step("book", called("book"), undo=cancel_booking)
        raise Abandon("the order was cancelled")
    carrier["down"] = False
    clock.advance(inbox_settings.STEPS_LEASE + timedelta(seconds=1))

    with receive_steps("shipping", "m1") as delivery:
        assert not delivery.duplicate  # and nothing left to call

    assert calls == ["book", "cancel book"]
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED
    assert row().state == "applied"


# Two threads racing one row's lock: SQLite locks the whole table instead.
@pytest.mark.postgresql
def test_a_stalled_worker_joining_as_a_redelivery_takes_over_is_the_one_fenced(
    clock, monkeypatch, isolation_level
):
    """A worker claims the delivery and stalls past its lease inside its
    unit's begin, just after it found its lease still its own. A redelivery
    takes the lapsed lease over and begins meanwhile. The stalled worker must
    not then join the unit over the redelivery's head: it holds a lease that
    is no longer the row's, and the redelivery, which holds it, would be
    fenced out mid-call (both calling the carrier at once)."""
    from inbox.querysets import InboxMessageManager
    from tests.stalls import Stall

    outcome = {}

    def redeliver():
        try:
            with receive_steps("shipping", "m1") as delivery:
                stall.began.set()
                stall.joined.wait(10)
                delivery.step("book", called("book by the redelivery"))
            outcome["redelivery"] = "applied"
        except Exception as exc:  # reported to the test
            outcome["redelivery"] = type(exc).__name__

    stall = Stall(clock, inbox_settings.STEPS_LEASE, redeliver)
    holds = InboxMessageManager.holds
    monkeypatch.setattr(InboxMessageManager, "holds", stall.wrap(holds))

    with pytest.raises(StepTakenOver), receive_steps("shipping", "m1") as first:
        stall.joined.set()
        stall.began.wait(10)
        first.step("book", called("book by the stalled worker"))
    stall.thread.join(10)

    assert outcome["redelivery"] == "applied"
    assert row().state == InboxMessage.State.APPLIED
    assert UnitRecord.objects.get().state == UnitRecord.State.DONE


@pytest.mark.parametrize("gives_up_by", ["last-attempt", "abandon"])
def test_a_worker_whose_lapsed_lease_another_claimed_does_not_give_the_unit_up(
    clock, gives_up_by
):
    # A redelivery claimed the lapsed lease and is about to resume the unit
    # (it has not joined it yet). The worker that lost the lease must write
    # nothing more (docs/steps.md): neither undo the steps the redelivery
    # resumes after, nor mark its delivery dead or applied.
    lease = inbox_settings.STEPS_LEASE
    with (
        pytest.raises(StepTakenOver),
        receive_steps("shipping", "m1", last_attempt=True) as first,
    ):
        first.step("book", called("book"), undo=undo_step)
        clock.advance(lease + timedelta(seconds=1))
        InboxMessage.objects.claim_running(
            "shipping", "m1", shared_clock.now(), lease, using="default"
        )
        if gives_up_by == "abandon":
            raise Abandon("the order was cancelled")
        raise RuntimeError("the carrier is down")

    assert calls == ["book"]  # nothing undone
    assert UnitRecord.objects.get().state == UnitRecord.State.RUNNING
    assert row().state == InboxMessage.State.RUNNING
