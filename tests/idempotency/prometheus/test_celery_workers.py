"""A Celery worker's pool processes each count what they run; served as the
observability page shows, one scrape of the worker adds them all up."""

import re
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.faults.processes import (
    celery_worker,
    free_port,
    send_task,
    wait_for_port,
    wait_until,
)
from tests.testapp.models import Widget

from .scraping import samples, value

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[3]
RECEIVED = {"subscriber": "faults.count", "outcome": "received"}


def scrape(port) -> dict:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return samples(answer.read().decode())


def pool_processes_that_counted(directory, worker) -> set[str]:
    """The pids with a counter file but the worker's main process (which
    writes one at startup): each pool process writes its own."""
    pids = {path.stem.rsplit("_", 1)[1] for path in directory.glob("counter_*.db")}
    return pids - {str(worker.process.pid)}


def test_one_scrape_of_a_worker_adds_up_every_pool_process(tmp_path):
    port = free_port()
    queue = f"metrics-{uuid.uuid4().hex[:8]}"
    sent = 0

    def consumed():
        return Widget.objects.count() == sent

    with celery_worker(
        queue,
        pool="prefork",
        concurrency=2,
        app="tests.idempotency.prometheus.metrics_worker",
        settings="tests.idempotency.prometheus.server_settings",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
        ONCE_TEST_METRICS_PORT=str(port),
    ) as worker:
        wait_for_port(port)
        # Rounds until both pool processes have run some (a bounded number).
        for _round in range(20):
            for _ in range(10):
                send_task(
                    "faults.count_the_message",
                    queue=queue,
                    kwargs={"message_id": f"m-{sent}"},
                )
                sent += 1
            wait_until(consumed, "the messages were not consumed", worker=worker)
            if len(pool_processes_that_counted(tmp_path, worker)) == 2:
                break
        counted = pool_processes_that_counted(tmp_path, worker)
        assert len(counted) == 2, "one process ran all"

        def counted_all():
            return value(scrape(port), "once_inbox_messages_total", **RECEIVED) == sent

        # Each count is written after its task's commit: wait for the last.
        wait_until(counted_all, "the scrape misses counts", worker=worker)


def test_the_worker_serves_its_metrics_with_the_block_the_page_shows():
    page = (ROOT / "docs" / "observability.md").read_text()
    (block,) = re.findall(r"```python\n(from celery.signals import .*?)```", page, re.S)
    module = (Path(__file__).parent / "metrics_worker.py").read_text()
    imports, handler = block.split("\n\n\n")
    assert imports in module
    assert handler.replace("9100", "PORT") in module
