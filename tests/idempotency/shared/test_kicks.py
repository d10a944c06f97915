"""A kick sent while the broker is down fails at once, not after kombu's retries."""

import socket
import time

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from idempotency.shared.kicks import send_task


@pytest.fixture
def refused_port():
    """A port nothing listens on: held bound, so no one else takes it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# Addresses of nothing: tests/test_standalone.py knows them.
REFUSING_REDIS = "redis://127.0.0.1:{}/0"
REFUSING_AMQP = "amqp://127.0.0.1:{}//"


@pytest.mark.parametrize("scheme", [REFUSING_REDIS, REFUSING_AMQP])
def test_a_kick_fails_at_once_when_the_broker_refuses(refused_port, scheme):
    # Every keyed request recording an event, and every webhook delivery,
    # sends a kick after its commit: kombu's first connection retries for
    # broker_connection_timeout and more (6 s with Celery's defaults), which
    # each such request would wait through during a broker outage.
    app = Celery("down", broker=scheme.format(refused_port), set_as_current=False)

    @app.task(name="down.drain", shared=False)
    def drain():
        pass

    send = send_task(drain)

    started = time.monotonic()
    with pytest.raises(OperationalError):
        send(0)
    with pytest.raises(OperationalError):
        send(0.5)

    assert time.monotonic() - started < 2


def test_an_eager_kick_runs_the_task_without_a_broker(refused_port):
    app = Celery(
        "eager", broker=REFUSING_REDIS.format(refused_port), set_as_current=False
    )
    app.conf.task_always_eager = True
    ran = []

    @app.task(name="eager.drain", shared=False)
    def drain():
        ran.append(True)

    send_task(drain)(0)

    assert ran == [True]
