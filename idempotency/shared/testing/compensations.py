"""Give a unit of work up after its steps ran, as an operator abandons a
stuck one, and judge its undos through ``effects()``.

``abandon_after_steps()`` runs a unit up to its last step's recovery point
and kills it there (the unit is stuck mid-steps), lets its lease lapse and
compensates it as the console's Abandon does (``compensate()``). Each step
that moved ``effects()`` must be moved back by its own undo, the last step
first, and the undos must not raise every time. Then, once per undo, the
unit dies right after that undo returned, before its recovery point, and is
abandoned again: the resumed compensation calls that undo a second time,
with the same key, and the effect must still be undone once.

``effects()`` must count what stands: a refunded charge, a cancelled booking
no longer counts (``charges - refunds``), or no undo can show.
"""

from collections.abc import Callable, Collection
from contextlib import suppress
from dataclasses import dataclass
from typing import Any
from unittest import mock

from django.utils.module_loading import import_string

from idempotency.shared.stepnames import UNDO_PREFIX
from idempotency.shared.steps import CompensationFailed, compensate
from idempotency.shared.steps.models import StepRecord, UnitRecord

from .clock import ClockControl, controlled_clock
from .crashes import SimulatedCrash
from .guarantees import CannotCheck, broken, measure
from .steps import StepKills, growth, step_kills

REASON = "abandoned by the proof kit"
KEPT_ADVICE = "kept_steps"


@dataclass
class _Stuck:
    """A unit killed right after its last step, its lease lapsed."""

    before: Any
    seen: StepKills
    growths: dict[str, Any]
    undos: dict[str, str]  # step name -> its undo's dotted path ("" for none)


def _stuck(
    start: Callable[[], Callable[[], object]],
    effects: Callable,
    last: int,
    clock: ClockControl,
) -> _Stuck | None:
    """A new unit run by ``start()``, killed right after its ``last`` step;
    None when this run took a shorter path."""
    run = start()
    before = measure(effects)
    with step_kills(last, effects) as seen, suppress(SimulatedCrash):
        run()
    if seen.unit is None or seen.killed is None:
        return None
    _lapse(clock, seen.unit)
    growths, previous = {}, before
    for name, reading in zip(seen.steps, seen.readings, strict=True):
        growths[name] = growth(previous, reading)
        previous = reading
    undos = dict(
        StepRecord.objects.filter(unit_id=seen.unit)
        .exclude(name__startswith=UNDO_PREFIX)
        .values_list("name", "undo")
    )
    return _Stuck(before, seen, growths, undos)


def _lapse(clock: ClockControl, unit: str) -> None:
    """Move the clock past the unit's lease: its dead worker's, or a dead
    compensation's."""
    row = UnitRecord.objects.filter(pk=unit).first()
    if row is not None and row.lease_expires_at is not None:
        clock.advance_past(row.lease_expires_at)


def _abandon(unit: str) -> CompensationFailed | None:
    """Abandon the unit, and once more when an undo raised, as an operator
    clicks again; the failure when it raised both times."""
    failed = None
    for _ in range(2):
        try:
            compensate(unit, REASON)
        except CompensationFailed as exc:
            failed = exc
        else:
            return None
    return failed


def abandon_after_steps(
    case: str,
    start: Callable[[], Callable[[], object]],
    owner: Any,
    guarantee: str,
    subject: str,
) -> bool:
    """Run the case on ``owner`` (an ``Endpoint``, a ``Consumer``, a
    ``Webhook``: its ``effects`` and ``kept_steps``): ``start()`` gives the
    callable running a new unit (a request with a new key, a new message).
    Raise ``GuaranteeBroken`` naming ``guarantee`` and ``subject`` (with
    ``{steps}``) when an undo is wrong; False when the unit ran no step."""
    __tracebackhide__ = True
    found = _undo_problems(case, start, owner.effects, owner.kept_steps)
    if found is None:
        return False
    steps, problems = found
    if problems:
        raise broken(
            guarantee,
            subject.format(steps=", ".join(steps))
            + "; killed right after the last one, then abandoned",
            *problems,
        )
    return True


def _undo_problems(
    case: str,
    start: Callable[[], Callable[[], object]],
    effects: Callable,
    kept: Collection[str],
) -> tuple[list[str], list[str]] | None:
    run = start()
    with step_kills() as probe:
        run()
    if not probe.steps:
        return None
    steps = probe.steps
    last = len(steps)
    with controlled_clock() as clock:
        stuck = _stuck(start, effects, last, clock)
        if stuck is None:
            return steps, []  # the unit took a shorter path this time
        if not any(_moved(grew) for grew in stuck.growths.values()):
            raise CannotCheck(
                case,
                f"effects() stayed {stuck.before} while the steps ran "
                f"({', '.join(steps)}); count what they do outside, as it stands "
                "(charges - refunds)",
                precondition="effects() to move when a step runs",
            )
        at_kill = measure(effects)
        with step_kills(effects=effects) as undone:
            failed = _abandon(stuck.seen.unit or "")
    problems = _missing_undos(stuck, kept)
    if failed is not None:
        problems.append(
            f"an undo raised every time the unit was abandoned: {failed} "
            "Stuck mid-steps, the unit never ends compensated: an undo must "
            "succeed when its effect is undone already or was never made (a "
            "refund of a refunded charge is done, not an error)"
        )
        return steps, problems
    judged = _judge_undos(stuck, at_kill, undone.undos)
    if judged:
        return steps, problems + judged  # a resumed compensation shows the same
    order = [name for name, _ in undone.undos]
    return steps, problems + _resumed(start, effects, last, order)


def _missing_undos(stuck: _Stuck, kept: Collection[str]) -> list[str]:
    return [
        f"step {name!r} moved effects ({_shown(grew)}) and has no undo: the unit "
        "gave up and its effect stays. Give the step undo= (a module-level "
        "function undoing it with the key it is given), or, when the effect "
        f"must stay (a mail sent), list the step in {KEPT_ADVICE}"
        for name, grew in stuck.growths.items()
        if _moved(grew) and not stuck.undos.get(name) and name not in kept
    ]


def _judge_undos(stuck: _Stuck, at_kill, undos: list[tuple[str, Any]]) -> list[str]:
    """Each undo, in the order it ran, must move back its own step's effect."""
    problems = []
    expected = [name for name in reversed(stuck.seen.steps) if stuck.undos.get(name)]
    ran = [name for name, _ in undos]
    if ran != expected:
        problems.append(
            f"the undos ran for {', '.join(ran) or 'no step'}, not for "
            f"{', '.join(expected)} (the steps with an undo, last first)"
        )
    previous = at_kill
    for position, (name, reading) in enumerate(undos):
        change, own = growth(previous, reading), stuck.growths.get(name)
        previous = reading
        if own is not None and change == _negated(own):
            continue
        others = [
            other
            for other, grew in stuck.growths.items()
            if other != name and _moved(grew) and change == _negated(grew)
        ]
        if others:
            order = "first" if position == 0 else f"number {position + 1}"
            problems.append(
                f"the undo of step {name!r} (run {order}) undid step "
                f"{others[0]!r}'s effect, not its own: the effects were undone in "
                "the wrong order. The undos run last step first: give each step "
                "the undo of its own effect, which it gets as its result"
            )
        elif not _moved(change):
            problems.append(
                f"the undo of step {name!r} changed nothing, while its step moved "
                f"effects ({_shown(own)}): undo the step's own effect with the "
                "result it is given"
            )
        else:
            problems.append(
                f"the undo of step {name!r} moved effects ({_shown(change)}), not "
                f"back by its step's ({_shown(own)}): undo exactly that step's "
                "effect, once"
            )
    return problems


def _resumed(
    start: Callable[[], Callable[[], object]],
    effects: Callable,
    last: int,
    undone: list[str],
) -> list[str]:
    """Per undo of ``undone``: die right after it returns, before its
    recovery point, and abandon again; the resumed compensation must not
    undo twice."""
    problems: list[str] = []
    for name in undone:
        with controlled_clock() as clock:
            stuck = _stuck(start, effects, last, clock)
            if stuck is None:
                continue
            path = stuck.undos.get(name)
            if not path:
                continue
            at_kill = measure(effects)
            try:
                with (
                    mock.patch(path, _dying_after(import_string(path))),
                    suppress(SimulatedCrash),
                ):
                    compensate(stuck.seen.unit or "", REASON)
            except CompensationFailed:
                continue  # an undo that raises: the abandon case says so
            _lapse(clock, stuck.seen.unit or "")
            if _abandon(stuck.seen.unit or "") is not None:
                continue
        # What stands: the effects of the steps without an undo.
        target = _plus(
            stuck.before,
            [grew for step, grew in stuck.growths.items() if not stuck.undos.get(step)],
        )
        after = measure(effects)
        if after == target:
            continue
        problems.append(
            f"the compensation died right after the undo of step {name!r} "
            "returned, before its recovery point, and the unit was abandoned "
            f"again: {_twice(at_kill, after, target)}. The resumed compensation "
            "calls that undo again with the same key: pass the key it is given "
            "(undo(key, result)) to the provider as its idempotency key, and "
            "make the undo idempotent (a second call changes nothing)"
        )
    return problems


def _dying_after(undo: Callable) -> Callable:
    def dying(key, result):
        undo(key, result)
        raise SimulatedCrash("died right after the undo returned")

    return dying


def _twice(at_kill, after, target) -> str:
    shown = []
    for name, value in _as_dict(after).items():
        start, want = _as_dict(at_kill).get(name, 0), _as_dict(target).get(name, 0)
        if value == want:
            continue
        what = "undone twice" if value - start == 2 * (want - start) else "wrong"
        label = f"{name}: " if name else ""
        shown.append(
            f"{label}the effect was {what}: effects went {start} → {value} "
            f"(expected {start} → {want})"
        )
    return "; ".join(shown)


def _as_dict(value) -> dict:
    return value if isinstance(value, dict) else {"": value}


def _moved(change) -> bool:
    return any(_as_dict(change).values())


def _negated(change):
    if isinstance(change, dict):
        return {name: -value for name, value in change.items()}
    return -change


def _plus(base, changes: list):
    if not isinstance(base, dict):
        return base + sum(changes)
    total = dict(base)
    for change in changes:
        for name, value in change.items():
            total[name] = total.get(name, 0) + value
    return total


def _shown(change) -> str:
    return (
        ", ".join(
            f"{name + ' ' if name else ''}{value:+}"
            for name, value in _as_dict(change).items()
            if value
        )
        or "no change"
    )


__all__ = ["REASON", "abandon_after_steps"]
