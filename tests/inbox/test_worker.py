"""A real Celery worker on Redis runs a consumer that raises: the message is
retried, and applied once, or ends dead in the inbox, never acked and lost."""

import contextlib
import json
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from idempotency.shared.steps.models import UnitRecord
from inbox import ops
from inbox.models import InboxMessage
from tests.celery import app
from tests.faults.processes import (
    ROOT,
    celery_worker,
    child_env,
    send_task,
    wait_until,
)
from tests.servers import INBOX_REDIS_URL
from tests.testapp.models import Widget

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

REDIS_URL = INBOX_REDIS_URL
TASK = "inbox_tests.flaky"
MAX_ATTEMPTS = 3  # worker_settings'


@pytest.fixture
def worker():
    queue = f"inbox-worker-{uuid.uuid4().hex[:8]}"
    with celery_worker(
        queue,
        broker_url=REDIS_URL,
        app="tests.inbox.worker",
        settings="tests.inbox.worker_settings",
    ) as running:
        running.queue = queue
        yield running
    redis.Redis.from_url(REDIS_URL).delete(queue)


def deliver(worker, message_id, **payload):
    send_task(
        TASK,
        queue=worker.queue,
        kwargs={"payload": payload, "headers": {"once-message-id": message_id}},
        broker_url=REDIS_URL,
    )


def runs(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def buried() -> bool:
    """Whether the message is dead because its attempts ran out. Any dead row
    is not: a redelivery counts a lost run on one, in a commit of its own,
    before it runs."""
    return InboxMessage.objects.dead().filter(attempts__gte=MAX_ATTEMPTS).exists()


def unacked(broker, queue) -> int:
    """The messages of ``queue`` a worker holds unacked. The hash is the Redis
    database's: other tests' workers, killed at their end, left theirs."""
    return sum(json.loads(held)[2] == queue for held in broker.hvals("unacked"))


def test_a_consumer_that_raises_is_retried_and_applied_once(worker, tmp_path):
    log = tmp_path / "runs"
    deliver(worker, "m-1", runs=str(log), failures=2)

    wait_until(lambda: Widget.objects.exists(), "never applied", worker=worker)

    assert runs(log) == 3  # two runs raised; the third, a retry, applied
    assert worker.log().count("Retry in") == 2
    assert list(Widget.objects.values_list("name", flat=True)) == ["m-1"]
    row = InboxMessage.objects.get()
    assert (row.message_id, row.state, row.duplicates) == ("m-1", "applied", 0)


def test_a_consumer_that_keeps_raising_ends_dead_in_the_inbox(worker, tmp_path):
    log, failing = tmp_path / "runs", tmp_path / "failing"
    failing.touch()
    deliver(worker, "m-2", runs=str(log), fail_while=str(failing))

    wait_until(buried, "never dead", worker=worker)

    row = InboxMessage.objects.get()
    assert (row.subscriber, row.message_id) == ("inbox-tests.flaky", "m-2")
    assert (row.attempts, runs(log)) == (3, 3)  # INBOX["MAX_ATTEMPTS"]
    assert "flaky run 3" in row.last_error
    assert row.redrive["task"] == TASK
    assert row.redrive["kwargs"]["headers"] == {"once-message-id": "m-2"}
    assert Widget.objects.count() == 0
    # Recorded, so acked: nothing left in the queue, nothing held unacked.
    broker = redis.Redis.from_url(REDIS_URL)
    wait_until(
        lambda: not unacked(broker, worker.queue), "still unacked", worker=worker
    )
    assert broker.llen(worker.queue) == 0

    # The cause fixed, an operator's replay applies it, once.
    failing.unlink()
    with app.connection_for_write(REDIS_URL) as connection:
        assert ops.replay([row], connection=connection) == [row]
    wait_until(lambda: Widget.objects.exists(), "replay not applied", worker=worker)
    row.refresh_from_db()
    assert (row.state, row.duplicates, runs(log)) == ("applied", 0, 4)


def test_a_steps_consumer_whose_attempts_run_out_compensates_once_and_is_dead(
    worker, tmp_path
):
    log, failing = tmp_path / "runs", tmp_path / "failing"
    failing.touch()
    send_task(
        "inbox_tests.flaky_steps",
        queue=worker.queue,
        kwargs={
            "payload": {"runs": str(log), "fail_while": str(failing)},
            "headers": {"once-message-id": "m-3"},
        },
        broker_url=REDIS_URL,
    )

    wait_until(buried, "never dead", worker=worker)

    # Booked once (the retries resumed past the step), unbooked once when
    # the last attempt gave up.
    assert log.read_text().splitlines() == ["book", "unbook"]
    row = InboxMessage.objects.get()
    assert (row.state, row.attempts) == ("dead", 3)
    unit = UnitRecord.objects.get()
    assert unit.state == UnitRecord.State.COMPENSATED
    assert "attempts ran out" in unit.reason


def test_a_copy_that_finds_the_delivery_busy_keeps_its_attempts(worker, tmp_path):
    # Another worker holds the delivery's steps for a while (its lease is
    # live): this copy comes back after each lease. Each of those returns
    # counted as an attempt, so once the holder died, the copy's first real
    # run was its last: one failure, and the unit was given up, dead.
    log, failing = tmp_path / "runs", tmp_path / "failing"
    failing.touch()
    subscriber, held = "inbox-tests.busy-steps", "Another worker holds m-busy"
    # Live until the copy came back twice: a lease of a few seconds could
    # lapse before a loaded machine's worker had started and tried twice.
    InboxMessage.objects.claim_running(
        subscriber, "m-busy", timezone.now(), timedelta(minutes=5), using="default"
    )
    send_task(
        "inbox_tests.busy_steps",
        queue=worker.queue,
        kwargs={
            "payload": {"runs": str(log), "fail_while": str(failing)},
            "headers": {"once-message-id": "m-busy"},
        },
        broker_url=REDIS_URL,
    )
    wait_until(
        lambda: worker.log().count(held) >= 2,
        "the copy did not come back twice",
        worker=worker,
    )
    # The holder dies: its lease lapses.
    InboxMessage.objects.for_message(subscriber, "m-busy").update(
        locked_until=timezone.now()
    )

    wait_until(buried, "never dead", timeout=60, worker=worker)

    assert worker.log().count("Another worker holds m-busy") >= 2
    assert runs(log) == 3  # INBOX["MAX_ATTEMPTS"] runs of the consumer


@contextlib.contextmanager
def refused_start(worker_app, settings_module, task_name):
    """Start a worker of ``worker_app`` under ``settings_module`` with one
    message of ``task_name`` waiting; yield how the worker ended (it must
    exit at start), the broker and the queue, deleted after."""
    queue = f"inbox-refused-{uuid.uuid4().hex[:8]}"
    broker = redis.Redis.from_url(REDIS_URL)
    send_task(
        task_name,
        queue=queue,
        kwargs={"payload": {}, "headers": {"once-message-id": "m-1"}},
        broker_url=REDIS_URL,
    )
    try:
        started = subprocess.run(
            [
                *(sys.executable, "-m", "celery", "-A", worker_app),
                *("worker", "-P", "solo", "-Q", queue, "--without-gossip"),
                *("--without-mingle", "--without-heartbeat"),
            ],
            cwd=ROOT,
            env=child_env(settings_module, CELERY_BROKER_URL=REDIS_URL),
            capture_output=True,
            text=True,
            timeout=60,
        )
        yield started, broker, queue
    finally:
        broker.delete(queue)


def test_a_worker_with_a_consumer_task_that_would_lose_messages_refuses_to_start():
    # A plain @shared_task(acks_late=True) over @consumer acks the message of
    # a run that raises: lost. inbox.E006 says so, but a worker's checks are
    # run and dropped; the worker exits before it takes a message instead.
    with refused_start(
        "tests.inbox.unwired_worker",
        "tests.inbox.worker_settings",
        "inbox_tests.unwired",
    ) as (started, broker, queue):
        assert started.returncode != 0
        assert "inbox.E006" in started.stderr
        assert "'inbox_tests.unwired'" in started.stderr
        assert broker.llen(queue) == 1  # the message waits for a sound worker


def test_a_worker_refuses_to_start_under_a_refused_inbox_setting():
    # Read when a consumer raises: each failed message was requeued at once,
    # the setting refused again, and requeued again, for ever, hundreds of
    # times a second. The worker exits before it takes a message instead.
    with refused_start(
        "tests.inbox.worker", "tests.inbox.refused_settings", "inbox_tests.flaky"
    ) as (started, broker, queue):
        assert started.returncode != 0
        assert "INBOX['MAX_ATTEMPTS'] must be a positive integer" in started.stderr
        assert broker.llen(queue) == 1  # the message waits for a sound worker
