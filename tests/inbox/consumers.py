"""Consumers that raise, for the worker tests (see ``tests.inbox.worker``)."""

import functools
import os

from idempotency.shared.steps import StepTakenOver
from inbox.api import consumer_task
from tests.testapp.models import Widget


@consumer_task("inbox-tests.flaky", name="inbox_tests.flaky")
def flaky(*, payload, headers):
    """Raise for the first ``payload["failures"]`` runs, or while the file
    ``payload["fail_while"]`` exists; then make one widget."""
    runs = payload["runs"]
    with open(runs, "a") as log:  # one line per run, committed or not
        log.write("run\n")
    with open(runs) as log:
        run = len(log.readlines())
    if run <= payload.get("failures", 0) or os.path.exists(
        payload.get("fail_while", "")
    ):
        raise RuntimeError(f"flaky run {run}")
    Widget.objects.create(name=headers["once-message-id"])


@consumer_task("inbox-tests.flaky-steps", name="inbox_tests.flaky_steps", steps=True)
def flaky_steps(delivery, *, payload, headers):
    """Book a widget in a step whose undo unbooks it, then raise while the
    file ``payload["fail_while"]`` exists: its attempts run out."""
    delivery.step("book", functools.partial(book, payload["runs"]), undo=unbook)
    if os.path.exists(payload["fail_while"]):
        raise RuntimeError("flaky steps")


def book(runs, key):
    with open(runs, "a") as log:
        log.write("book\n")
    return {"runs": runs}


def unbook(key, booked):
    with open(booked["runs"], "a") as log:
        log.write("unbook\n")


# Runs of taken_over, for its test: the first finds a newer worker took over.
taken_over_runs: list[str] = []


@consumer_task("inbox-tests.taken-over", name="inbox_tests.taken_over")
def taken_over(*, payload, headers):
    """Raise as a steps worker whose lease a newer one took over, once."""
    taken_over_runs.append(headers["once-message-id"])
    if len(taken_over_runs) == 1:
        raise StepTakenOver("A newer worker holds this delivery.")
    Widget.objects.create(name=headers["once-message-id"])


@consumer_task(
    "inbox-tests.by-event-id",
    name="inbox_tests.by_event_id",
    message_id=lambda *, payload, headers: payload["event_id"],
)
def by_event_id(*, payload, headers):
    """Find the message id in the payload: a message without one raises
    before the consumer runs."""
    Widget.objects.create(name=payload["event_id"])


@consumer_task("inbox-tests.busy-steps", name="inbox_tests.busy_steps", steps=True)
def busy_steps(delivery, *, payload, headers):
    """Log each run that got the delivery, then raise while the file
    ``payload["fail_while"]`` exists."""
    with open(payload["runs"], "a") as log:
        log.write("run\n")
    if os.path.exists(payload["fail_while"]):
        raise RuntimeError("busy steps")
