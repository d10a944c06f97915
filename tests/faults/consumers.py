"""The inbox consumers of the workers the fault tests start (``tests.faults.worker``
imports them once Django is set up)."""

import os
import signal

from inbox.api import consumer_task
from tests.testapp.models import Widget


@consumer_task("faults.poison", name="faults.kill_the_consumer")
def kill_the_consumer(*, message_id):
    """A consumer whose every run kills its worker, as an out-of-memory kill
    or a hard time limit does: its transaction dies open, its message unacked."""
    Widget.objects.create(name=f"poison {message_id}")
    os.kill(os.getpid(), signal.SIGKILL)


@consumer_task("faults.count", name="faults.count_the_message")
def count_the_message(*, message_id):
    """A consumer with a countable effect: one widget a message."""
    Widget.objects.create(name=f"message {message_id}")


def undo_the_widget(key, widget):
    """The undo of ``kill_the_steps_consumer``'s first step."""
    Widget.objects.filter(pk=widget).update(name=f"undone {key[:8]}")


@consumer_task("faults.poison-steps", name="faults.kill_the_steps_consumer", steps=True)
def kill_the_steps_consumer(delivery, *, message_id):
    """A steps consumer whose second step kills its worker on every run (an
    out-of-memory kill while it calls out): a redelivery resumes it there."""
    delivery.step(
        "widget",
        lambda key: Widget.objects.create(name=f"poison {message_id}").pk,
        atomic=True,
        undo=undo_the_widget,
    )
    delivery.step("die", lambda key: os.kill(os.getpid(), signal.SIGKILL))
