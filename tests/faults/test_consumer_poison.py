"""An inbox consumer that kills its worker on every run (out of memory, a hard
time limit): its message comes back after each death, and ends dead in the
inbox once its deaths used up ``INBOX["MAX_ATTEMPTS"]``, instead of killing a
worker for ever; the other messages are applied. So does a steps consumer's,
whose unit is then given up.

The consumers are ``tests.faults.worker``'s: ``kill_the_consumer`` SIGKILLs its
own process, ``count_the_message`` writes one widget a message, and
``kill_the_steps_consumer`` SIGKILLs its process in its second step.
"""

import time
import uuid
from contextlib import contextmanager

import pytest

from idempotency.shared.steps.models import UnitRecord
from inbox.models import InboxMessage
from tests.testapp.models import Widget

from .processes import celery_worker, send_task, wait_until

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

SETTINGS = "tests.faults.poison_settings"
MAX_ATTEMPTS = 3  # poison_settings'


@contextmanager
def poisoned(task, settings=SETTINGS):
    """A worker of its own, sent the poison message ``task``."""
    queue = f"faults-inbox-poison-{uuid.uuid4().hex[:8]}"
    # prefork: the pool replaces each killed child, and reject-on-worker-lost
    # (acks_late) puts the message back in the queue.
    with celery_worker(
        queue, pool="prefork", settings=settings, FAULTS_QUEUE=queue
    ) as worker:
        send_task(task, kwargs={"message_id": "poison"}, queue=queue)
        worker.queue = queue
        yield worker


def test_a_consumer_killing_its_worker_ends_dead_and_the_others_are_applied():
    with poisoned("faults.kill_the_consumer") as worker:
        queue = worker.queue
        for n in range(3):
            send_task(
                "faults.count_the_message", kwargs={"message_id": f"m{n}"}, queue=queue
            )

        def settled():
            applied = InboxMessage.objects.filter(
                subscriber="faults.count", state=InboxMessage.State.APPLIED
            ).count()
            dead = InboxMessage.objects.filter(
                subscriber="faults.poison",
                state=InboxMessage.State.DEAD,
                attempts__gte=MAX_ATTEMPTS,
            ).exists()
            return applied == 3 and dead

        # Before: the poison came back after every death, for ever, and never
        # reached the inbox: nothing said it could not be processed.
        wait_until(
            settled, "the poison message never ended dead", timeout=60, worker=worker
        )
        # Acked: it comes back no more, and kills no more workers.
        time.sleep(3)
        assert worker.log().count("exited with 'signal 9 (SIGKILL)'") == MAX_ATTEMPTS

    poison = InboxMessage.objects.get(subscriber="faults.poison")
    assert poison.message_id == "poison"
    assert poison.attempts == MAX_ATTEMPTS
    assert poison.redrive["task"] == "faults.kill_the_consumer"  # a replay can run it
    assert "worker" in poison.last_error
    # Its writes died with it; the others' each made one widget.
    assert sorted(Widget.objects.values_list("name", flat=True)) == [
        "message m0",
        "message m1",
        "message m2",
    ]


def test_a_steps_consumer_killing_its_worker_ends_dead_and_gives_its_unit_up():
    # Each copy waits out the dead worker's lease (two seconds here), takes
    # the delivery over and resumes at the step that kills. Before: it did so
    # for ever, killing a worker (and calling out again) once a lease.
    with poisoned(
        "faults.kill_the_steps_consumer", settings="tests.faults.poison_steps_settings"
    ) as worker:
        wait_until(
            InboxMessage.objects.filter(state=InboxMessage.State.DEAD).exists,
            "the poison message never ended dead",
            timeout=60,
            worker=worker,
        )
        time.sleep(5)  # acked: it comes back no more
        assert worker.log().count("exited with 'signal 9 (SIGKILL)'") == MAX_ATTEMPTS

    poison = InboxMessage.objects.get(subscriber="faults.poison-steps")
    assert "its worker died" in poison.last_error
    # Its first step ran once, and its unit gave up without running again:
    # the step's undo ran.
    (widget,) = Widget.objects.all()
    assert widget.name.startswith("undone ")
    assert UnitRecord.objects.get().state == UnitRecord.State.COMPENSATED
