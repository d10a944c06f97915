"""The Celery app of the worker the metrics test starts: the fault tests' app,
serving what its pool counts as docs/observability.md shows (on a free port:
the test checks the page's block is this module's, but for the port)."""

import os

from celery.signals import worker_init

from tests.faults.worker import app

__all__ = ["app"]

PORT = int(os.environ["ONCE_TEST_METRICS_PORT"])


@worker_init.connect
def serve_metrics(**kwargs):
    # In the worker's main process, once: each process of its pool counts in
    # files of its own in PROMETHEUS_MULTIPROC_DIR, and a scrape adds them up.
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    start_http_server(PORT, registry=registry)
