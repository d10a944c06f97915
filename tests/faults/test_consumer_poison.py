"""An inbox consumer that kills its worker on every run (out of memory, a hard
time limit): its message comes back after each death, and ends dead in the
inbox once its deaths used up ``INBOX["MAX_ATTEMPTS"]``, instead of killing a
worker for ever; the other messages are applied.

The consumers are ``tests.faults.worker``'s: ``kill_the_consumer`` SIGKILLs its
own process, ``count_the_message`` writes one widget a message.
"""

import time
import uuid

import pytest

from inbox.models import InboxMessage
from tests.testapp.models import Widget

from .processes import celery_worker, send_task, wait_until

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

SETTINGS = "tests.faults.poison_settings"
MAX_ATTEMPTS = 3  # poison_settings'


def test_a_consumer_killing_its_worker_ends_dead_and_the_others_are_applied():
    queue = f"faults-inbox-poison-{uuid.uuid4().hex[:8]}"
    # prefork: the pool replaces each killed child, and reject-on-worker-lost
    # (acks_late) puts the message back in the queue.
    with celery_worker(
        queue, pool="prefork", settings=SETTINGS, FAULTS_QUEUE=queue
    ) as worker:
        send_task(
            "faults.kill_the_consumer", kwargs={"message_id": "poison"}, queue=queue
        )
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
