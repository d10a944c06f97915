"""Make code fail or die at chosen points, the way a process or a database does.

* ``failing_after_first_write()``: the view's first write succeeds, then it
  raises, as a bug or a lost connection would (the exception is an ordinary
  one, and an ``IntegrityError``: the library sees a failed attempt, and
  code taking a database error for a duplicate catches it).
* ``commit_points()``: number every point where work becomes durable (a
  transaction's COMMIT, or a write in autocommit mode), and optionally die
  just before or just after one of them. Dying is ``SimulatedCrash``, a
  ``BaseException`` like ``SystemExit``: no ``except Exception`` in the code
  under test or in the library catches it, so nothing records a failure,
  as when the process is killed.
* ``die_then_rerun()``: run a piece of work, die at one durable point, and
  run it again as a redelivery would.
"""

import re
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

from django.db import IntegrityError, connection, connections
from django.db.models.signals import post_save

from idempotency.shared.signals import step_done

from .clock import controlled_clock

BEFORE = "before"
_POST_SAVE_UID = "django-once-proof-kit-failure"
AFTER = "after"

# Statements that change rows; a WITH query counts when it holds one of them.
_WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "REPLACE", "TRUNCATE"})
# The verb and the table of a plain write, which is all a summary needs.
_WRITE_TARGET = re.compile(r'(INSERT INTO|UPDATE|DELETE FROM) ("[^"]+"|\S+)', re.I)


class SimulatedCrash(BaseException):
    """The process died here: nothing after this point runs."""


class InjectedFailure(RuntimeError, IntegrityError):
    """A failure the proof kit made happen, after the view's first write.

    An ``IntegrityError`` too, so code that takes one for a duplicate
    (``except IntegrityError`` or ``DatabaseError`` around its work) gets
    the kit's failure as it would a real one, and the case sees it swallowed.
    """


def require_committed_transactions(case: str) -> None:
    """Refuse to run ``case`` inside a test transaction: nothing commits there,
    and other threads see nothing."""
    from . import guarantees

    if connection.in_atomic_block:
        raise guarantees.CannotCheck(
            case,
            "it needs committed transactions, and this test runs inside one: "
            "use pytest.mark.django_db(transaction=True) or the transactional_db "
            "fixture",
        )


def is_write(sql: str) -> bool:
    """Whether ``sql`` changes rows (not BEGIN, SAVEPOINT, SET, a SELECT...)."""
    words = sql.upper().split()
    if not words:
        return False
    if words[0] == "WITH":
        return not _WRITES.isdisjoint(words)
    return words[0] in _WRITES


def statement(sql: str, length: int = 70) -> str:
    """A statement in short: ``INSERT INTO "shop_order"``, or its start."""
    text = " ".join(sql.split())
    write = _WRITE_TARGET.match(text)
    if write:
        return write.group(0)
    if text.upper().startswith("WITH") and (main := _main_write(text)):
        return f"WITH … {main}"
    return text if len(text) <= length else text[: length - 1] + "…"


def _main_write(text: str) -> str | None:
    """What a WITH query's main statement writes: the first write outside
    the parentheses of its CTEs."""
    depth = 0
    for at, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif (
            depth == 0
            and text[at - 1] == " "
            and (write := _WRITE_TARGET.match(text, at))
        ):
            return write.group(0)
    return None


# Failing after the first write.


@dataclass
class Injection:
    """Where ``failing_after_first_write()`` failed; None until it did."""

    after: str | None = None


@contextmanager
def failing_after_first_write(
    ignore_tables: Collection[str] = (),
) -> Iterator[Injection]:
    """Raise ``InjectedFailure`` right after the first write in this thread
    (the view's: in the claim's transaction when the view is guarded).

    Statements that name one of ``ignore_tables`` (the library's own records,
    sessions) are let through.
    """
    injection = Injection()

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if (
            injection.after is None
            and is_write(sql)
            and not any(table in sql for table in ignore_tables)
        ):
            injection.after = statement(sql)
            raise InjectedFailure(f"injected by the proof kit after {injection.after}")
        return result

    with _wrapping_every_connection(wrapper):
        yield injection


@contextmanager
def failing_as_first_save_completes(
    ignore_models: Collection[type] = (),
) -> Iterator[Injection]:
    """Raise ``InjectedFailure`` from ``post_save`` of the first model saved
    in the block (but ``ignore_models``: the library's records, sessions).
    The row is written and the transaction sound, so the code under test
    gets the exception in its own ``except``, as from the step after it."""
    injection = Injection()

    def fail_once(sender, instance, **kwargs):
        if injection.after is None and sender not in ignore_models:
            injection.after = f"post_save of {sender._meta.label}"
            raise InjectedFailure(
                f"injected by the proof kit after saving {instance!r}"
            )

    post_save.connect(fail_once, weak=False, dispatch_uid=_POST_SAVE_UID)
    try:
        yield injection
    finally:
        post_save.disconnect(dispatch_uid=_POST_SAVE_UID)


def failures_past(models: Collection[Any]) -> tuple[Callable, Callable]:
    """The kit's two failures of a unit of work, as context manager
    factories: right after its first write, and as its first model save
    completes; both past ``models``, the library's own rows, whose writes
    are not the work and prove nothing failed after."""
    tables = [f'"{model._meta.db_table}"' for model in models]
    return (
        partial(failing_after_first_write, ignore_tables=tables),
        partial(failing_as_first_save_completes, models),
    )


@contextmanager
def slowed(seconds: float) -> Iterator[None]:
    """Pause after every statement of this thread: widens race windows, so a
    check-then-act bug shows up on the first run instead of now and then."""

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        time.sleep(seconds)
        return result

    with _wrapping_every_connection(wrapper):
        yield


# Commit points.


@dataclass
class CommitPoints:
    """The durable points reached so far, and the crash to simulate, if any."""

    crash_at: int | None = None
    when: str = AFTER
    points: list[str] = field(default_factory=list)
    crashed: str | None = None
    # Writes of the transaction in progress, to describe its COMMIT.
    _pending: list[str] = field(default_factory=list)
    # The steps whose recovery point each durable point made, by its number:
    # the library's SQL alone does not say which step a death came before.
    recovery_points: dict[int, list[str]] = field(default_factory=dict)

    def describe(self) -> str:
        """``1) COMMIT of INSERT INTO "inbox_message"…; 2) …``."""
        return "; ".join(
            f"{n}) {p}{self._steps_of(n)}" for n, p in enumerate(self.points, 1)
        )

    def _steps_of(self, number: int) -> str:
        steps = self.recovery_points.get(number)
        if not steps:
            return ""
        names = ", ".join(repr(step) for step in steps)
        return f" (the recovery point of step {names})"

    def reach(self, what: str, when: str, connection) -> None:
        """Called just before and just after each durable point; dies there
        when told to."""
        if when == BEFORE:
            number = len(self.points) + 1
            if (self.crash_at, self.when) == (number, BEFORE):
                self.crashed = f"just before durable point {number}: {what}"
                raise SimulatedCrash(self.crashed)
            return
        self.points.append(what)
        number = len(self.points)
        if (self.crash_at, self.when) == (number, AFTER):
            self.crashed = f"just after durable point {number}: {what}"
            # A dead process runs no on_commit callbacks (Django keeps the
            # pending ones here until autocommit is switched back on).
            connection.run_on_commit = []
            raise SimulatedCrash(self.crashed)


@contextmanager
def commit_points(crash_at: int | None = None, when: str = AFTER):
    """Count the durable points of the block, in this thread; with
    ``crash_at=n``, die just ``before`` or ``after`` the n-th one."""
    tracker = CommitPoints(crash_at=crash_at, when=when)

    def wrapper(execute, sql, params, many, context):
        connection = context["connection"]
        autocommitted = (
            is_write(sql)
            and not connection.in_atomic_block
            and connection.get_autocommit()
        )
        if not autocommitted:
            if is_write(sql):
                tracker._pending.append(statement(sql))
            return execute(sql, params, many, context)
        what = f"autocommitted {statement(sql)}"
        tracker.reach(what, BEFORE, connection)
        result = execute(sql, params, many, context)
        tracker.reach(what, AFTER, connection)
        return result

    watched = threading.get_ident()

    def on_step(sender, *, step, undo=False, **kwargs):
        # Sent once the recovery point is durable: the last point made it
        # (when the step ran here: other threads' points are not counted).
        if tracker.points and not undo and threading.get_ident() == watched:
            steps = tracker.recovery_points.setdefault(len(tracker.points), [])
            steps.append(step)

    uid = f"once-commit-points-{id(tracker)}"
    step_done.connect(on_step, weak=False, dispatch_uid=uid)
    with ExitStack() as stack:
        stack.callback(step_done.disconnect, dispatch_uid=uid)
        stack.enter_context(_wrapping_every_connection(wrapper))
        for connection in connections.all():
            stack.enter_context(_watching_commits(connection, tracker))
        yield tracker


@contextmanager
def _watching_commits(connection, tracker: CommitPoints):
    commit = connection.commit

    def watched():
        writes = ", ".join(tracker._pending) or "no write"
        what = f"COMMIT of {writes}"
        tracker._pending.clear()
        try:
            tracker.reach(what, BEFORE, connection)
        except SimulatedCrash:
            # The connection dies with the process: the database rolls the
            # transaction back.
            connection.rollback()
            raise
        commit()
        tracker.reach(what, AFTER, connection)

    rollback = connection.rollback

    def watched_rollback():
        tracker._pending.clear()
        rollback()

    # Atomic blocks call connection.commit() and rollback(): shadow them on
    # this connection object only, for the block's duration.
    connection.commit = watched
    connection.rollback = watched_rollback
    try:
        yield
    finally:
        del connection.commit, connection.rollback


def die_then_rerun(
    run: Callable[[], object], number: int, when: str, lease: timedelta | None
) -> str | None:
    """Run ``run()``, die ``when`` (before or after) its ``number``-th durable
    point, and run it again, as a broker redelivers unacked work; first past
    ``lease`` when the dead run held one (a steps lease). Return where it
    died, or None when this run took a shorter path without that point."""
    with controlled_clock() as clock:
        with (
            commit_points(crash_at=number, when=when) as points,
            suppress(SimulatedCrash),
        ):
            run()
        if points.crashed is None:
            return None
        if lease is not None:
            clock.advance(lease)  # the dead worker's lease lapses
        run()
    return points.crashed


@contextmanager
def _wrapping_every_connection(wrapper: Callable) -> Iterator[None]:
    with ExitStack() as stack:
        for connection in connections.all():
            stack.enter_context(connection.execute_wrapper(wrapper))
        yield


__all__ = [
    "AFTER",
    "BEFORE",
    "CommitPoints",
    "InjectedFailure",
    "Injection",
    "SimulatedCrash",
    "commit_points",
    "die_then_rerun",
    "failing_after_first_write",
    "failing_as_first_save_completes",
    "failures_past",
    "is_write",
    "require_committed_transactions",
    "slowed",
    "statement",
]
