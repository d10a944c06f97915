"""Kill a unit of work right after one of its steps, as a process dies.

``step_kills(kill_after=n)`` listens to ``step_done``, which is sent once a
step's recovery point has committed, and raises ``SimulatedCrash`` (a
``BaseException``: no ``except Exception`` in the unit or the library
catches it) after the n-th step of the unit: nothing after it runs, the
unit's lease stays taken, its owner never marks it finished. Without
``kill_after`` it only lists the steps the unit ran.

``each_once()`` judges the effects afterwards: each counted effect (a number,
or a dict of numbers, one per outside effect) must have grown exactly as
much as a clean run made it grow. ``kill_after_each_step()`` runs the whole
case for a consumer or a webhook handler; ``die_then_judge()`` judges the
same way a unit that died at a durable point and was redelivered.
"""

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from idempotency.shared.signals import step_done
from idempotency.shared.stepnames import UNDO_PREFIX

from .clock import controlled_clock
from .crashes import SimulatedCrash, die_then_rerun
from .guarantees import measure, once_verdict


@dataclass
class StepKills:
    """The steps seen so far, and the one the unit was killed after, if any;
    with ``effects``, its reading as each step's and each undo's recovery
    point committed."""

    kill_after: int | None = None
    effects: Callable | None = None
    steps: list[str] = field(default_factory=list)
    killed: str | None = None
    unit: str | None = None
    readings: list = field(default_factory=list)
    undos: list[tuple[str, Any]] = field(default_factory=list)

    def describe(self) -> str:
        return ", ".join(self.steps) or "none"


@contextmanager
def step_kills(
    kill_after: int | None = None, effects: Callable | None = None
) -> Iterator[StepKills]:
    tracker = StepKills(kill_after, effects)

    def on_step(sender, *, step, unit=None, undo=False, **kwargs):
        reading = None if effects is None else measure(effects)
        if undo:
            # A compensation's own step: not the unit's work.
            tracker.undos.append((step.removeprefix(UNDO_PREFIX), reading))
            return
        tracker.unit = unit
        tracker.steps.append(step)
        tracker.readings.append(reading)
        if len(tracker.steps) == tracker.kill_after:
            tracker.killed = step
            raise SimulatedCrash(f"killed right after step {step!r}")

    uid = f"once-step-kills-{uuid.uuid4().hex}"
    step_done.connect(on_step, weak=False, dispatch_uid=uid)
    try:
        yield tracker
    finally:
        step_done.disconnect(dispatch_uid=uid)


def kill_after_each_step(
    steps: list[str],
    start: Callable[[], Callable[[], object]],
    effects: Callable,
    delta,
    lease: timedelta,
) -> list[str]:
    """For each of ``steps`` (those a clean run made ``effects`` grow by
    ``delta`` with): ``start()`` a new unit of work and run the callable it
    returns, killed right after that step; let the dead worker's ``lease``
    lapse and run it again, as a redelivery does. Returns what went wrong."""
    problems = []
    for number, name in enumerate(steps, 1):
        run = start()
        before = measure(effects)
        with controlled_clock() as clock:
            with step_kills(kill_after=number) as kills, suppress(SimulatedCrash):
                run()
            if kills.killed is None:
                continue  # this run took a shorter path
            clock.advance(lease)
            with step_kills() as retried:
                run()
        found = _verdicts(
            f"killed right after step {name!r}, then redelivered",
            before,
            effects,
            delta,
        )
        if found and (renamed := renamed_steps(kills, retried, len(steps))):
            found.append(renamed)
        problems += found
    return problems


def renamed_steps(killed: StepKills, retried: StepKills, total: int) -> str | None:
    """Why a retry ran again steps the killed attempt had stored, when their
    names tell: the retry stored more steps than the ``total`` of a clean
    run left, under names the killed attempt never used (a time, a random
    value or a counter in the name: the retry cannot find the recovery
    point, so it runs the step again, under another derived key)."""
    redone = len(retried.steps) - (total - len(killed.steps))
    new = [name for name in retried.steps[:redone] if name not in killed.steps]
    if redone <= 0 or not new:
        return None
    return (
        f"the retry ran its steps again under other names ({_names(new)}; the "
        f"killed attempt stored {_names(killed.steps)}): a step's name must be "
        "the same on every attempt (no time, random value or counter in it), "
        "or the retry cannot find the step's recovery point and runs it again"
    )


def _names(steps: list[str]) -> str:
    return ", ".join(repr(step) for step in steps)


def die_then_judge(
    run: Callable[[], object],
    number: int,
    when: str,
    lease: timedelta | None,
    *,
    effects: Callable,
    before,
    delta,
    told: str,
) -> list[str]:
    """``die_then_rerun()``, then what went wrong with each effect that had to
    grow by ``delta`` from ``before``, each verdict said after ``told`` with
    where the run died in it (``"died {crashed}, then redelivered"``). Empty
    when nothing did, or when this run took a shorter path without that
    point."""
    crashed = die_then_rerun(run, number, when, lease)
    if crashed is None:
        return []  # the point does not exist on this run's path
    return _verdicts(told.format(crashed=crashed), before, effects, delta)


def _verdicts(event: str, before, effects: Callable, delta) -> list[str]:
    """``each_once()`` on the effects as they read now, each said after what
    happened to the unit (``event``)."""
    after = measure(effects)
    return [f"{event}: {verdict}" for verdict in each_once(before, after, delta)]


def each_once(before, after, delta) -> list[str]:
    """What went wrong with each effect that had to grow by ``delta`` (a
    number, or a dict of numbers by effect); empty when nothing did."""
    if not isinstance(delta, dict):
        verdict = once_verdict(before, after, delta)
        return [verdict] if verdict else []
    return [
        f"{name}: {verdict}"
        for name in delta
        if (verdict := once_verdict(before.get(name, 0), after[name], delta[name]))
    ]


def fail_then_retry(
    start: Callable[[], tuple[str, Callable, Callable]],
    failures,
    *,
    effects: Callable,
    delta,
    returned: str,
    retried: str,
) -> list[str] | None:
    """Per failure of ``failures`` (``crashes.failures_past()``), a new unit:
    ``start()`` gives ``(label, run, retry)``; ``run()`` works under the
    failure and returns the exception it ended with (None when it returned:
    its message is acked, no retry comes); ``retry()`` runs it again as the
    broker does. Each effect must have grown by ``delta`` in the end; what
    went wrong is said after ``returned`` or ``retried``. None when no
    failure happened: the unit wrote nothing of its own to fail after."""
    problems: list[str] = []
    failed = False
    for failing in failures:
        label, run, retry = start()
        before = measure(effects)
        with failing() as injection:
            raised = run()
        if injection.after is None:
            if raised is not None:
                raise raised  # not ours: the unit failed by itself
            continue
        failed = True
        where = f"{label}: the kit raised after its first write ({injection.after})"
        if raised is None:
            told = f"{where}; {returned}"
        else:
            retry()
            told = f"{where}; it raised {type(raised).__name__}, {retried}"
        problems += _verdicts(told, before, effects, delta)
    return problems if failed else None


def growth(before, after):
    """How much the effects grew: a number, or a dict by effect."""
    if isinstance(after, dict):
        return {name: after[name] - before.get(name, 0) for name in after}
    return after - before


__all__ = [
    "StepKills",
    "die_then_judge",
    "each_once",
    "fail_then_retry",
    "growth",
    "kill_after_each_step",
    "renamed_steps",
    "step_kills",
]
