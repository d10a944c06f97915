"""Durable steps: recovery points, the fence, and compensations (sagas)."""

import enum
import logging
import threading
from datetime import timedelta

import pytest
from django.db import transaction

from idempotency.shared import clock as apps_clock
from idempotency.shared import signals
from idempotency.shared.steps import (
    Abandon,
    CompensationFailed,
    CompensationInProgress,
    StepInTransaction,
    StepResultNotJSON,
    StepTakenOver,
    UndoNotImportable,
    UnitRunning,
    begin,
    compensate,
    handle,
)
from idempotency.shared.steps.models import StepRecord, UnitRecord
from idempotency.shared.units import KEYS, Unit
from tests.conftest import replica_behind, run_concurrently
from tests.signals import listening
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)
UNIT = Unit(KEYS, ("user:1", "payment.create", "k-1"))

# What the fake outside world saw: (what, key, argument) per call.
calls: list[tuple] = []
# Undos named here raise instead (until removed).
failing_undos: set[str] = set()
undo_started = threading.Event()


@pytest.fixture(autouse=True)
def _reset_calls():
    calls.clear()
    failing_undos.clear()
    undo_started.clear()


def charge(key):
    calls.append(("charge", key, None))
    return {"charge": "ch_1", "amount": 500}


def book(key):
    calls.append(("book", key, None))
    return "shp_1"


def email(key):
    calls.append(("email", key, None))
    return None


def refund(key, result):
    calls.append(("refund", key, result))
    undo_started.set()
    if "refund" in failing_undos:
        raise ConnectionError("provider down")
    return {"refund": "re_1"}


def cancel_booking(key, result):
    calls.append(("cancel", key, result))
    undo_started.set()
    if "cancel" in failing_undos:
        raise ConnectionError("carrier down")
    return "cancelled"


def slow_refund(key, result):
    calls.append(("refund", key, result))
    undo_started.set()
    threading.Event().wait(0.3)  # widens the window a racing abandon would use
    return None


class Crash(BaseException):
    """The process dies here: nothing after it runs, nothing is noted."""


def start(unit=UNIT, **kwargs):
    return begin(unit, "payment.create (user:1)", lease=LEASE, **kwargs)


def names(unit=UNIT):
    return dict(
        StepRecord.objects.filter(unit_id=unit.identity).values_list("name", "state")
    )


# --- recovery points ---------------------------------------------------------


def test_a_step_runs_once_and_a_retry_gets_its_stored_result():
    first = start()
    assert first.step("charge", charge) == {"charge": "ch_1", "amount": 500}

    retry = start()
    assert retry.step("charge", charge) == {"charge": "ch_1", "amount": 500}

    assert calls == [("charge", UNIT.derive("charge"), None)]
    assert retry.attempt == first.attempt + 1
    (row,) = StepRecord.objects.all()
    assert (row.name, row.state, row.attempt, row.attempts) == ("charge", "done", 1, 1)


def test_a_crash_between_the_call_and_its_recovery_point_calls_again_with_the_same_key(
    monkeypatch,
):
    def crash(*args, **kwargs):
        raise Crash

    first = start()
    with monkeypatch.context() as patched:
        patched.setattr(handle, "store_point", crash)
        with pytest.raises(Crash):
            first.step("charge", charge)
    assert names() == {}

    start().step("charge", charge)

    # At least once outside, with one key: the provider deduplicates on it.
    assert [c[:2] for c in calls] == [("charge", UNIT.derive("charge"))] * 2
    assert names() == {"charge": "done"}


def test_the_results_come_back_as_json_stores_them():
    first = start()
    assert first.step("pair", lambda key: (1, 2)) == [1, 2]
    assert start().step("pair", lambda key: (3, 4)) == [1, 2]


@pytest.mark.postgresql
def test_a_step_stores_its_recovery_point_in_one_statement(django_assert_num_queries):
    steps = start()
    steps.step("charge", charge)
    with django_assert_num_queries(1):
        assert steps.step("book", book) == "shp_1"
    with django_assert_num_queries(1):
        assert steps.step("email", email) is None
    assert names() == {"charge": "done", "book": "done", "email": "done"}


class Paid(enum.StrEnum):
    YES = "yes"


@pytest.mark.parametrize(
    "value", [None, True, False, "", "reçu", Paid.YES, 7, 7.5], ids=repr
)
def test_a_scalar_result_comes_back_to_the_first_run_as_the_retry_reads_it(value):
    first = start().step("scalar", lambda key: value)
    resumed = start().step("scalar", lambda key: "another")
    assert (first, type(first)) == (resumed, type(resumed))


def test_a_float_comes_back_to_the_first_run_as_the_retry_reads_it():
    # jsonb prints 1.2345678901234568e+18 as 1234567890123456800, which reads
    # back as an int, and not the float's value: the run that called and the
    # one that resumed must see the same result.
    def quote(key):
        return {"amount": 1.2345678901234568e18, "ratio": 1.5e-07, "whole": 2.0}

    first = start().step("quote", quote)
    resumed = start().step("quote", quote)
    assert first == resumed
    assert {k: type(v) for k, v in first.items()} == {
        k: type(v) for k, v in resumed.items()
    }


def test_a_negative_zero_comes_back_to_the_first_run_as_the_retry_reads_it():
    # jsonb keeps numbers as numeric, which has no negative zero: -0.0 comes
    # back 0.0, and its sign (copysign, 1 / x, formatting) differed between
    # the run that called and the one that resumed.
    def quote(key):
        return {"delta": -0.0}

    first = start().step("quote", quote)
    resumed = start().step("quote", quote)
    assert repr(first) == repr(resumed) == "{'delta': 0.0}"


def test_an_objects_keys_come_back_to_the_first_run_in_the_order_a_retry_reads():
    # jsonb keeps an object's keys shorter first, then by their bytes, and
    # the last of duplicate ones: iterating the result (rendering it, taking
    # its first key) must not differ between the run that called and a retry.
    def quote(key):
        return {"currency": "eur", "id": "q_1", "é": 1, "z": {"bb": 1, "a": 2}}

    first = start().step("quote", quote)
    resumed = start().step("quote", quote)
    assert list(first) == list(resumed)
    assert list(first["z"]) == list(resumed["z"])


def test_a_step_that_raises_is_noted_and_called_again_next_time():
    def flaky(key):
        calls.append(("flaky", key, None))
        if len(calls) == 1:
            raise ConnectionError("timeout")
        return "ok"

    with pytest.raises(ConnectionError):
        start().step("flaky", flaky)
    row = StepRecord.objects.get()
    assert (row.state, row.attempts, row.error) == (
        "failed",
        1,
        "ConnectionError: timeout",
    )

    assert start().step("flaky", flaky) == "ok"
    row = StepRecord.objects.get()  # done under a new id: the completion order
    assert (row.state, row.attempts, row.error, row.attempt) == ("done", 2, "", 2)


def test_a_steps_error_a_text_column_refuses_is_noted_escaped():
    def refused(key):
        raise ConnectionError("peer sent \x00")

    with pytest.raises(ConnectionError):
        start().step("refused", refused)
    row = StepRecord.objects.get()
    assert (row.state, row.error) == ("failed", "ConnectionError: peer sent \\x00")


def test_a_step_inside_an_open_transaction_is_refused():
    steps = start()
    with transaction.atomic(), pytest.raises(StepInTransaction, match="atomic=True"):
        steps.step("charge", charge)
    assert calls == []


def test_an_atomic_step_commits_its_work_with_its_recovery_point(monkeypatch):
    def make_widget(key):
        return Widget.objects.create(name=key[:10]).pk

    def crash(*args, **kwargs):
        raise Crash

    with monkeypatch.context() as patched:
        patched.setattr(handle, "store_point", crash)
        with pytest.raises(Crash):
            start().step("widget", make_widget, atomic=True)
    assert Widget.objects.count() == 0  # rolled back with its recovery point

    pk = start().step("widget", make_widget, atomic=True)
    assert start().step("widget", make_widget, atomic=True) == pk
    assert Widget.objects.count() == 1


def test_an_atomic_step_may_run_inside_the_callers_transaction():
    steps = start()
    with transaction.atomic():
        steps.step(
            "widget", lambda key: Widget.objects.create(name="w").pk, atomic=True
        )
    assert names() == {"widget": "done"}


def test_an_atomic_step_rolled_back_with_the_callers_transaction_runs_again():
    # Its recovery point went with the caller's rollback: the same attempt
    # calling it again must write the widget, not hand back the pk of a row
    # that no longer exists.
    steps = start()

    def make_widget(key):
        return Widget.objects.create(name="w").pk

    with pytest.raises(Crash), transaction.atomic():
        steps.step("widget", make_widget, atomic=True)
        raise Crash
    assert names() == {}
    assert not steps.done("widget")

    pk = steps.step("widget", make_widget, atomic=True)
    assert list(Widget.objects.values_list("pk", flat=True)) == [pk]
    assert names() == {"widget": "done"}


@pytest.mark.parametrize(
    "value",
    [object(), {"at": float("nan")}, "a\x00b", {"a\x00": 1}, ["\ud800"], {1j: 1}],
    ids=repr,
)
def test_a_result_json_cannot_hold_is_refused_and_not_stored(value):
    with pytest.raises(StepResultNotJSON):
        start().step("odd", lambda key: value)
    assert StepRecord.objects.get().state == "failed"


def test_a_result_nested_too_deeply_is_refused_and_not_stored():
    deep: list = []
    for _level in range(10_000):
        deep = [deep]
    with pytest.raises(StepResultNotJSON, match="nested too deeply"):
        start().step("deep", lambda key: deep)
    assert StepRecord.objects.get().state == "failed"


@pytest.mark.parametrize(
    "undo",
    [lambda key, result: None, str.upper, handle.Steps.finish],
    ids=["lambda", "builtin method", "method"],
)
def test_an_undo_that_cannot_be_found_by_its_path_is_refused_before_the_call(undo):
    with pytest.raises(UndoNotImportable, match="top level of a module"):
        start().step("charge", charge, undo=undo)
    assert calls == []


def test_a_closure_undo_is_refused():
    def local_refund(key, result):
        return None

    with pytest.raises(UndoNotImportable):
        start().step("charge", charge, undo=local_refund)


@pytest.mark.parametrize(
    "name", ["", "undo:charge", "x" * 201, "a\x00b", "a\x1fb", 3], ids=repr
)
def test_step_names_are_checked(name):
    with pytest.raises(handle.StepError):
        start().step(name, charge)
    assert calls == []


def test_a_step_name_utf8_cannot_encode_is_refused_as_a_step_error():
    # Neither its row nor derive()'s hash can take a lone surrogate: refused
    # as a name, like a NUL, not as a UnicodeEncodeError from deep inside.
    with pytest.raises(handle.StepError, match="surrogate"):
        start().step("charge\ud800", charge, undo=refund)
    assert calls == []
    assert names() == {}


def test_a_step_name_its_undos_name_would_not_fit_is_refused_before_the_call():
    # Its undo is stored as "undo:<name>": past the column's size the unit
    # could never be compensated.
    name = "x" * 196
    with pytest.raises(handle.StepError, match="at most 195 characters"):
        start().step(name, charge, undo=refund)
    assert calls == []

    steps = start()
    steps.step("x" * 195, charge, undo=refund)
    steps.step(name, book)  # no undo: the whole column is the name's
    steps.give_up("declined")
    assert names()["undo:" + "x" * 195] == "done"
    assert UnitRecord.objects.get().state == "compensated"


def _long_named_undo(key, result):
    return None


# A module-level function whose dotted path is longer than the undo column.
LONG_UNDO = "refund_" + "x" * 260
_long_named_undo.__name__ = _long_named_undo.__qualname__ = LONG_UNDO
globals()[LONG_UNDO] = _long_named_undo


def test_an_undo_whose_dotted_path_would_not_fit_is_refused_before_the_call():
    # Its recovery point could never be stored: each retry would call out
    # again and fail to store, and the unit never get past the step.
    with pytest.raises(handle.StepError, match="255"):
        start().step("charge", charge, undo=_long_named_undo)
    assert calls == []


def test_each_recovery_point_sends_step_done_after_its_commit():
    heard = []

    def receiver(sender, **kwargs):
        heard.append(kwargs)

    signals.step_done.connect(receiver)
    try:
        start().step("charge", charge)
    finally:
        signals.step_done.disconnect(receiver)
    assert heard == [
        {
            "signal": signals.step_done,
            "kind": KEYS,
            "unit": UNIT.identity,
            "intent": UNIT.intent,
            "step": "charge",
            "attempt": 1,
            "undo": False,
        }
    ]


def test_a_fresh_owner_starts_the_unit_over():
    start().step("charge", charge)
    start(fresh=True).step("charge", charge)
    assert len(calls) == 2


@pytest.mark.postgresql
def test_a_unit_joined_again_reads_its_recovery_points_where_writes_go(
    reads_from_a_replica,
):
    # The recovery points decide which steps run: read on a replica behind
    # the primary, a retry found none and called the provider again.
    with replica_behind():
        start().step("charge", charge)
        retry = start()
        assert retry.step("charge", charge) == {"charge": "ch_1", "amount": 500}

    assert calls == [("charge", UNIT.derive("charge"), None)]


# --- the fence ---------------------------------------------------------------


def test_an_attempt_taken_over_mid_call_cannot_store_its_recovery_point():
    in_call, taken_over = threading.Event(), threading.Event()
    outcome = {}

    def slow_charge(key):
        in_call.set()
        taken_over.wait(10)
        return "from the old attempt"

    def old_attempt(_index):
        steps = start()
        try:
            steps.step("charge", slow_charge)
        except StepTakenOver as exc:
            outcome["old"] = exc

    thread = threading.Thread(target=run_concurrently, args=(1, old_attempt))
    thread.start()
    assert in_call.wait(10)
    newer = start()  # its lease lapsed, say: the owner let a retry take it over
    taken_over.set()
    thread.join(10)

    assert isinstance(outcome["old"], StepTakenOver)
    assert names() == {}
    assert newer.step("charge", charge) == {"charge": "ch_1", "amount": 500}


def test_finish_is_fenced_too():
    old, _newer = start(), start()
    with pytest.raises(StepTakenOver):
        old.finish()
    assert UnitRecord.objects.get().state == "running"


def test_a_step_called_after_its_unit_finished_is_refused_before_its_call():
    # Misuse: a thread still running once the view returned. Its step has
    # no attempt left to store it: it must not make the outside call either.
    steps = start()
    steps.step("charge", charge)
    steps.finish()
    with pytest.raises(StepTakenOver, match="finished"):
        steps.step("book", book)
    assert [call[0] for call in calls] == ["charge"]
    assert set(names()) == {"charge"}


# --- compensations -----------------------------------------------------------


def run_saga(steps):
    steps.step("charge", charge, undo=refund)
    steps.step("book", book, undo=cancel_booking)
    steps.step("email", email)  # no undo: nothing to take back


def test_giving_up_undoes_the_completed_steps_in_reverse_order_once_each():
    heard = []

    def receiver(sender, **kwargs):
        heard.append((kwargs["steps"], kwargs["reason"]))

    steps = start()
    run_saga(steps)
    calls.clear()
    signals.unit_compensated.connect(receiver)
    try:
        steps.give_up("card declined later")
        assert compensate(UNIT.identity, "again") is False
    finally:
        signals.unit_compensated.disconnect(receiver)

    assert calls == [
        ("cancel", UNIT.derive("undo:book"), "shp_1"),
        ("refund", UNIT.derive("undo:charge"), {"charge": "ch_1", "amount": 500}),
    ]
    assert heard == [(["book", "charge"], "card declined later")]
    unit = UnitRecord.objects.get()
    assert (unit.state, unit.reason, unit.lease_expires_at) == (
        "compensated",
        "card declined later",
        None,
    )
    assert names() == {
        "charge": "undone",
        "book": "undone",
        "email": "done",
        "undo:book": "done",
        "undo:charge": "done",
    }


def test_each_step_and_a_compensation_are_logged_once_with_their_signals_arguments(
    caplog,
):
    caplog.set_level(logging.DEBUG, logger="idempotency")
    with listening() as heard:
        steps = start()
        steps.step("charge", charge, undo=refund)
        steps.give_up("card declined later")

    logged = [r for r in caplog.records if r.name == "idempotency"]
    sent = [(name, kwargs) for name, kwargs in heard if name != "purged"]
    assert [(r.levelname, r.getMessage().split()[0]) for r in logged] == [
        ("DEBUG", "Step"),
        ("DEBUG", "Step"),
        ("WARNING", "keys"),
    ]
    # What a structured log gets is what a receiver gets.
    assert [
        {name: vars(r)[name] for name in kwargs}
        for r, (_name, kwargs) in zip(logged, sent, strict=True)
    ] == [kwargs for _name, kwargs in sent]
    assert [name for name, _kwargs in sent] == [
        "step_done",
        "step_done",
        "unit_compensated",
    ]
    for record in logged:
        assert UNIT.derive("charge") not in record.getMessage()
        assert "k-1" not in record.getMessage()  # the raw client key


def test_an_abandon_reason_a_text_column_refuses_is_kept_escaped():
    steps = start()
    steps.step("charge", charge, undo=refund)
    steps.give_up("declined: \x00")

    unit = UnitRecord.objects.get()
    assert (unit.state, unit.reason) == ("compensated", "declined: \\x00")
    assert [c[0] for c in calls] == ["charge", "refund"]


def test_undos_run_in_reverse_order_when_a_later_attempts_clock_is_behind(clock):
    first = start()
    first.step("charge", charge, undo=refund)
    # The retry runs on another host, whose clock is two seconds behind.
    clock.advance(seconds=-2)
    retry = start()
    retry.step("book", book, undo=cancel_booking)
    calls.clear()

    retry.give_up("declined")

    assert [c[0] for c in calls] == ["cancel", "refund"]


def test_undos_run_in_reverse_order_of_completion_when_the_clock_stands_still(
    monkeypatch,
):
    # A frozen (or coarse) clock: every recovery point gets the same time.
    moment = apps_clock.now()
    monkeypatch.setattr(apps_clock, "now", lambda: moment)
    timeouts = [ConnectionError("timeout")]

    def flaky_charge(key):
        if timeouts:
            raise timeouts.pop()
        return charge(key)

    with pytest.raises(ConnectionError):
        start().step("charge", flaky_charge, undo=refund)
    retry = start()
    retry.step("book", book, undo=cancel_booking)
    retry.step("charge", flaky_charge, undo=refund)  # completed last
    calls.clear()

    with listening() as heard:
        retry.give_up("declined")

    assert [c[0] for c in calls] == ["refund", "cancel"]
    compensated = [kwargs for name, kwargs in heard if name == "unit_compensated"]
    assert [kwargs["steps"] for kwargs in compensated] == [["charge", "book"]]


def test_a_given_up_unit_runs_no_more_steps():
    steps = start()
    steps.step("charge", charge, undo=refund)
    steps.give_up("declined")
    calls.clear()

    with pytest.raises(Abandon, match="declined"):
        start().step("book", book)
    assert calls == []


def test_an_undo_that_raises_stays_compensating_and_the_next_abandon_continues(
    clock,
):
    steps = start()
    run_saga(steps)
    calls.clear()
    failing_undos.add("refund")

    with pytest.raises(CompensationFailed, match="ConnectionError: provider down"):
        steps.give_up("declined")
    unit = UnitRecord.objects.get()
    assert (unit.state, unit.error) == (
        "compensating",
        "ConnectionError: provider down",
    )
    assert names()["book"] == "undone"

    failing_undos.clear()
    assert compensate(UNIT.identity, "operator") is True

    # The booking's undo ran once; the refund's twice (failed, then done).
    assert [c[0] for c in calls] == ["cancel", "refund", "refund"]
    unit.refresh_from_db()
    assert (unit.state, unit.error, unit.reason) == ("compensated", "", "declined")


@pytest.mark.postgresql  # row locks; SQLite locks the whole table
def test_two_abandons_racing_compensate_once(clock, isolation_level):
    steps = start()
    steps.step("charge", charge, undo=slow_refund)
    calls.clear()
    clock.advance(LEASE + timedelta(seconds=1))  # the worker died: stuck

    def abandon(_index):
        try:
            return compensate(UNIT.identity, "operator")
        except CompensationInProgress:
            return "busy"

    outcomes = run_concurrently(2, abandon)

    assert [c[0] for c in calls] == ["refund"]
    assert sorted(outcomes, key=str) == [True, "busy"]
    assert UnitRecord.objects.get().state == "compensated"


def test_an_operator_cannot_abandon_a_unit_whose_worker_holds_a_live_lease(clock):
    start().step("charge", charge, undo=refund)
    with pytest.raises(UnitRunning):
        compensate(UNIT.identity, "operator")

    clock.advance(LEASE + timedelta(seconds=1))
    assert compensate(UNIT.identity, "operator") is True
    assert [c[0] for c in calls] == ["charge", "refund"]


def crash_before_the_recovery_point(monkeypatch, steps, name, fn, **kwargs):
    """The worker dies after ``fn`` called out, before its result is stored."""

    def crash(*args, **kwargs):
        raise Crash

    with monkeypatch.context() as patched:
        patched.setattr(handle, "store_point", crash)
        with pytest.raises(Crash):
            steps.step(name, fn, **kwargs)


def test_abandoning_after_a_death_mid_call_leaves_that_call_without_undo(
    monkeypatch, clock
):
    # As docs/steps.md says: an undo needs the step's stored result.
    crash_before_the_recovery_point(monkeypatch, start(), "charge", charge, undo=refund)
    clock.advance(LEASE + timedelta(seconds=1))

    assert compensate(UNIT.identity, "operator") is True

    assert [c[0] for c in calls] == ["charge"]  # charged, never refunded
    assert UnitRecord.objects.get().state == "compensated"


def test_a_retry_before_the_abandon_stores_the_call_so_its_undo_runs(
    monkeypatch, clock
):
    crash_before_the_recovery_point(monkeypatch, start(), "charge", charge, undo=refund)
    clock.advance(LEASE + timedelta(seconds=1))

    # The retry resumes: the same derived key, so the provider answers the
    # first charge, and the recovery point is stored this time.
    start().step("charge", charge, undo=refund)
    clock.advance(LEASE + timedelta(seconds=1))
    assert compensate(UNIT.identity, "operator") is True

    key = UNIT.derive("charge")
    assert calls == [
        ("charge", key, None),
        ("charge", key, None),
        ("refund", UNIT.derive("undo:charge"), {"charge": "ch_1", "amount": 500}),
    ]


def test_a_compensation_fences_out_the_attempt_it_took_over(clock):
    old = start()
    old.step("charge", charge, undo=refund)
    clock.advance(LEASE + timedelta(seconds=1))
    compensate(UNIT.identity, "operator")

    # The worker wakes up: its handle still thinks it runs, the fence knows.
    with pytest.raises(StepTakenOver):
        old.step("book", book)
    assert "book" not in names()


def refund_and_record(key, result):
    from outbox.api import record

    with transaction.atomic():
        record("payment", 1, "payment.refunded", {"charge": result["charge"]})
    return None


def test_a_unit_given_up_from_another_units_code_records_under_its_own_intent(
    clock,
):
    """A saga's consumer that gives up the payment (compensate()) runs its
    undos: they are the payment's work, so what they record names the
    payment's intent, not the intent of the consumer that gave it up."""
    from idempotency.shared import units
    from outbox.models import OutboxMessage

    start().step("charge", charge, undo=refund_and_record)
    clock.advance(LEASE + timedelta(seconds=1))
    consumer = Unit(units.INBOX, ("shipping", "m-1"))

    with units.running(consumer):
        assert compensate(UNIT.identity, "no carrier takes it") is True

    assert OutboxMessage.objects.get().headers["once-intent"] == UNIT.intent


def charge_and_record(key):
    from outbox.api import record

    record("payment", 1, "payment.charged", {"key": key})
    return {"charge": "ch_1"}


def test_a_step_run_on_a_worker_thread_records_under_its_units_intent():
    """Steps of one unit run in parallel on worker threads (two outside calls
    at once, say), where the caller's current unit does not follow: the
    step is its unit's work all the same, and what it records names the
    unit's intent."""
    from idempotency.shared import units
    from outbox.models import OutboxMessage

    steps = start()

    with units.running(UNIT):
        run_concurrently(
            1, lambda _: steps.step("charge", charge_and_record, atomic=True)
        )

    assert OutboxMessage.objects.get().headers["once-intent"] == UNIT.intent
