"""One trace from the request to the consumer, through the real processes: a
gunicorn POST records an order's event, the relay (kicked on commit) runs in
a Celery worker on Redis and sends it, and the worker's inbox consumer
processes it. Each process exports its spans to a file this test reads."""

import json
import subprocess
import sys
from contextlib import contextmanager

import pytest
import redis

from inbox.models import InboxMessage
from tests.faults.processes import ROOT, child_env, gunicorn, stop, wait_until
from tests.faults.test_http_worker_killed import post
from tests.servers import TRACING_REDIS_URL
from tests.testapp.models import Stock

from . import SPANS_DIR, read_spans

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

SETTINGS = "tests.tracing.settings"
KEY = "order-traced-1"


@contextmanager
def celery_worker(spans_dir):
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "tests.celery", "worker"),
            *("-P", "solo", "-l", "warning", "--without-gossip"),
            *("--without-mingle", "--without-heartbeat"),
        ],
        cwd=ROOT,
        env=environment(spans_dir),
    )
    try:
        yield worker
    finally:
        stop(worker, timeout=20)


def environment(spans_dir):
    return child_env(
        SETTINGS,
        CELERY_BROKER_URL=TRACING_REDIS_URL,
        **{SPANS_DIR: str(spans_dir)},
    )


@pytest.fixture
def spans_dir(tmp_path, monkeypatch):
    redis.Redis.from_url(TRACING_REDIS_URL).flushdb()
    monkeypatch.setenv(SPANS_DIR, str(tmp_path))  # gunicorn() copies os.environ
    monkeypatch.setenv("CELERY_BROKER_URL", TRACING_REDIS_URL)
    return tmp_path


def one(spans, name):
    (found,) = [span for span in spans if span["name"] == name]
    return found


def ids(span):
    return {"trace_id": span["trace_id"], "span_id": span["span_id"]}


def test_one_trace_holds_the_request_create_send_and_process(make_user, spans_dir):
    make_user("alice")
    Stock.objects.create(sku="BOOK-1", on_hand=10)  # what the order reserves
    with gunicorn(settings=SETTINGS) as base, celery_worker(spans_dir) as worker:
        status, _, _ = post(base, KEY)
        assert status == 201
        wait_until(
            lambda: InboxMessage.objects.exists(),
            "the worker did not consume the order's event",
            timeout=60,
        )
        # The same key again: a replay, its own request span.
        status, headers, _ = post(base, KEY)
        assert (status, headers.get("Idempotent-Replayed")) == (201, "true")
        assert worker.poll() is None

    spans = read_spans(spans_dir)
    request, replay = [span for span in spans if span["kind"] == "SERVER"]
    create = one(spans, "create order")
    send = one(spans, "send order")
    process = one(spans, "process testapp.reserve-stock")

    # One trace: the request, its event's create, the relay's send (in the
    # worker) and the consumer's process (in the worker).
    trace_ids = {span["trace_id"] for span in (request, create, send, process)}
    assert trace_ids == {request["trace_id"]}
    assert create["parent"] == ids(request)
    assert create["kind"] == "PRODUCER"
    # The relay ran with no trace around it: it continues the message's, and
    # links its creation context, as the consumer does.
    assert (send["kind"], send["parent"], send["links"]) == (
        "CLIENT",
        ids(create),
        [ids(create)],
    )
    assert (process["kind"], process["parent"], process["links"]) == (
        "CONSUMER",
        ids(create),
        [ids(create)],
    )
    assert send["pid"] == process["pid"] != request["pid"]
    assert send["attributes"]["messaging.batch.message_count"] == 1
    assert (
        process["attributes"]["messaging.message.id"]
        == (create["attributes"]["messaging.message.id"])
    )

    # The keyed request's server spans say what the claim decided, never the key.
    assert {
        name: value
        for name, value in request["attributes"].items()
        if name.startswith("idempotency.")
    } == {
        "idempotency.operation": "order.create",
        "idempotency.outcome": "executed",
        "idempotency.replayed": False,
    }
    assert replay["attributes"]["idempotency.outcome"] == "replayed"
    assert replay["attributes"]["idempotency.replayed"] is True
    assert KEY not in json.dumps(spans)
