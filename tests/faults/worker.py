"""The Celery app of the workers the fault tests start: the suite's app, plus a
switch that SIGKILLs the worker's own process at a chosen point of a task.

The test arms it through the worker's environment:

- ``FAULTS_KILL_TASK``: the name of the task whose execution dies;
- ``FAULTS_KILL_AFTER``: ``commit`` (the task returned, so its transaction has
  committed, and its message is not acked yet), or the start of an SQL
  statement (it ran inside the task's transaction, nothing is committed);
- ``FAULTS_KILL_ONCE``: a marker file; only the process that creates it dies,
  so the redelivery runs through.

It also registers the webhook handlers those workers run: plain ones (one
that kills its worker, one that fails once), and steps ones with the test
app's crash points (``ONCE_TEST_CRASH_AT``).
"""

import os
import signal

from celery import signals

from tests.celery import app
from webhooks.handlers import on

__all__ = ["app"]

# Its consumers import the inbox's models: loaded once Django is set up.
app.conf.imports = (*app.conf.imports, "tests.faults.consumers")

AFTER_COMMIT = "commit"


def _armed(task) -> str | None:
    if task.name != os.environ.get("FAULTS_KILL_TASK"):
        return None
    return os.environ.get("FAULTS_KILL_AFTER")


def _die_once():
    try:
        # O_EXCL: of all executions, exactly one creates the marker and dies.
        os.close(os.open(os.environ["FAULTS_KILL_ONCE"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_after_statement(prefix):
    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith(prefix) and context["connection"].in_atomic_block:
            _die_once()
        return result

    return wrapper


@signals.task_prerun.connect
def _arm(task=None, **kwargs):
    after = _armed(task)
    if after and after != AFTER_COMMIT:
        from django.db import connection

        connection.execute_wrappers.append(_kill_after_statement(after))


@signals.task_postrun.connect
def _fire(task=None, **kwargs):
    after = _armed(task)
    if after == AFTER_COMMIT:
        # The prefork pool acks in the parent, the solo pool after this signal:
        # either way the ack has not happened yet.
        _die_once()
    elif after:
        from django.db import connection

        connection.execute_wrappers.clear()


@on("github", "push")
def count_push(event):
    """A webhook handler with a countable business effect: one widget a push."""
    from tests.testapp.models import Widget

    Widget.objects.create(name=f"push {event.delivery_id}")


@on("github", "release", steps=True)
def charge_release(event):
    """A steps handler with a keyed outside call and a local write, and the
    crash points of ``tests.testapp.crashes`` around and inside both."""
    from tests.testapp.crashes import crash_point
    from tests.testapp.payments import charge_card

    crash_point("before:charge")
    charge = event.step("charge", lambda key: charge_card(500, key))
    crash_point("after:charge")
    event.step("widget", lambda key: _release_widget(charge["id"]), atomic=True)
    crash_point("after:widget")


def _release_widget(charge_id):
    from tests.testapp.crashes import crash_point
    from tests.testapp.models import Widget

    widget = Widget.objects.create(name=f"release {charge_id}")
    crash_point("call:widget")  # inserted, its recovery point not committed
    return widget.pk


@on("github", "deployment", steps=True)
def deploy_failing_once(event):
    """A steps handler whose first run fails after its step (of all runs, the
    one that creates the ``FAULTS_FAIL_ONCE`` marker), as a flaky service
    does; the retry resumes past the step and succeeds."""
    from tests.testapp.models import Widget

    event.step(
        "widget",
        lambda key: Widget.objects.create(name=f"deploy {event.delivery_id}").pk,
        atomic=True,
    )
    if _first_to_fail():
        raise ConnectionError("the deploy service is down")


def _first_to_fail() -> bool:
    """Whether this run is the one, of all, that creates the
    ``FAULTS_FAIL_ONCE`` marker."""
    try:
        os.close(os.open(os.environ["FAULTS_FAIL_ONCE"], os.O_CREAT | os.O_EXCL))
    except (KeyError, FileExistsError):
        return False
    return True


@on("github", "issues")
def kill_the_worker(event):
    """A handler whose every run kills its worker, as an out-of-memory kill
    or a hard time limit does: its transaction dies open."""
    from tests.testapp.models import Widget

    Widget.objects.create(name=f"issue {event.delivery_id}")
    os.kill(os.getpid(), signal.SIGKILL)


@on("stripe", "invoice.paid")
def count_invoice(event):
    """Another source's plain handler: one widget an invoice."""
    from tests.testapp.models import Widget

    Widget.objects.create(name=f"invoice {event.delivery_id}")


@on("standard", "order.placed")
def place_order_failing_once(event):
    """A plain handler whose first run raises (of all runs, the one that
    creates the ``FAULTS_FAIL_ONCE`` marker): retried, it writes its widget."""
    from tests.testapp.models import Widget

    if _first_to_fail():
        raise ConnectionError("the order service is down")
    Widget.objects.create(name=f"order {event.delivery_id}")
