"""The kit's fault injection and clock, on real transactions."""

from contextlib import suppress
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from idempotency.shared import clock
from idempotency.shared.testing.clock import controlled_clock
from idempotency.shared.testing.crashes import (
    AFTER,
    BEFORE,
    InjectedFailure,
    SimulatedCrash,
    commit_points,
    failing_after_first_write,
    is_write,
)
from idempotency.shared.testing.steps import die_then_judge
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)


def two_commits():
    Widget.objects.create(name="autocommitted")
    with transaction.atomic():
        Widget.objects.create(name="in a transaction")
        transaction.on_commit(lambda: Widget.objects.create(name="on commit"))


def names():
    return sorted(Widget.objects.values_list("name", flat=True))


def test_commit_points_are_autocommitted_writes_and_commits():
    with commit_points() as points:
        two_commits()

    assert len(points.points) == 3  # the on_commit write autocommits too
    assert points.points[0].startswith('autocommitted INSERT INTO "testapp_widget"')
    assert points.points[1].startswith('COMMIT of INSERT INTO "testapp_widget"')
    assert points.crashed is None


def test_dying_just_before_a_commit_rolls_its_transaction_back():
    with commit_points(crash_at=2, when=BEFORE) as points, suppress(SimulatedCrash):
        two_commits()

    assert points.crashed.startswith("just before durable point 2: COMMIT of")
    assert names() == ["autocommitted"]


def test_dying_just_after_a_commit_keeps_it_and_runs_no_on_commit_callback():
    with commit_points(crash_at=2, when=AFTER) as points, suppress(SimulatedCrash):
        two_commits()

    assert points.crashed.startswith("just after durable point 2: COMMIT of")
    assert names() == ["autocommitted", "in a transaction"]
    # The connection works on after the crash.
    Widget.objects.create(name="later")


def test_a_simulated_crash_is_not_an_exception_the_code_can_catch():
    assert not issubclass(SimulatedCrash, Exception)


def test_the_failure_comes_right_after_the_first_write_not_an_ignored_one():
    ignored = ['"auth_user"']
    with (
        failing_after_first_write(ignore_tables=ignored) as injection,
        pytest.raises(InjectedFailure),
    ):
        get_user_model().objects.create(username="ignored")
        Widget.objects.create(name="first")

    assert injection.after.startswith('INSERT INTO "testapp_widget"')
    assert names() == ["first"]  # it happened; what comes after did not


def widgets():
    return Widget.objects.count()


def test_a_unit_that_died_and_ran_again_is_judged_effect_by_effect():
    before = widgets()

    problems = die_then_judge(
        two_commits,
        2,
        AFTER,
        None,
        effects=widgets,
        before=before,
        delta=3,
        told="died {crashed}, then redelivered",
    )

    # The dead run kept two widgets, the rerun made three more; the
    # on_commit one died with the process.
    assert problems == [
        "died just after durable point 2: COMMIT of INSERT INTO "
        '"testapp_widget", then redelivered: the effect is wrong: effects went '
        "0 → 5 (expected 0 → 3)"
    ]


def test_a_unit_whose_run_has_no_such_point_is_not_judged():
    problems = die_then_judge(
        two_commits,
        9,
        BEFORE,
        None,
        effects=widgets,
        before=widgets(),
        delta=3,
        told="died {crashed}, then redelivered",
    )

    assert problems == []
    assert len(names()) == 3  # it ran once, to its end


@pytest.mark.parametrize(
    ("sql", "write"),
    [
        ("INSERT INTO t VALUES (1)", True),
        ("  update t set a = 1", True),
        ("WITH x AS (SELECT 1) UPDATE t SET a = 1", True),
        ("WITH x AS (SELECT 1) SELECT * FROM x", False),
        ("BEGIN", False),
        ('SAVEPOINT "s1"', False),
        ("SELECT 1 FOR UPDATE", False),
    ],
)
def test_what_counts_as_a_write(sql, write):
    assert is_write(sql) is write


def test_the_controlled_clock_moves_forward_and_gives_the_real_one_back():
    real = clock.now
    with controlled_clock() as control:
        start = clock.now()
        control.advance(hours=25)
        assert clock.now() - start >= timedelta(hours=25)
        control.advance_to(start)  # never back
        assert clock.now() - start >= timedelta(hours=25)
    assert clock.now is real
