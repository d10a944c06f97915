"""The apps' gauges, computed from the database at each scrape, and the
registry the /metrics view serves."""

import logging
import os
import weakref
from contextlib import ExitStack, contextmanager

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections, transaction
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess

from ..shared import clock, contributions

logger = logging.getLogger("idempotency")

# Each gauge statement's bound on PostgreSQL. One that times out ends its
# app's gauges, so the four apps' reads stay within Prometheus's default
# 10 s scrape_timeout even when every table is locked.
STATEMENT_TIMEOUT_MS = 2000


class GaugeCollector:
    """Every app's declared gauges (``metric_gauges``), read when scraped.

    Gauges are computed by the scraping process from the database, so under
    gunicorn every worker would answer the same figures: they need none of
    prometheus-client's per-process files.
    """

    def collect(self):
        now = clock.now()
        for gauges in contributions.metric_gauges():
            try:
                # Read whole first: a query failing halfway adds no family.
                with _bounded():
                    families = list(gauges(now))
            except (DatabaseError, ImproperlyConfigured):
                # The scrape goes on without them: failing it would drop the
                # counters too (the project's own, in a shared registry),
                # which are what shows a database outage. An app's refused
                # setting (its views answer 500, naming it) is no reason
                # either.
                logger.warning(
                    "Could not read the gauges of %s; scraped without them.",
                    gauges.__module__,
                    exc_info=True,
                )
                continue
            yield from families

    def describe(self):
        # Nothing: registering must not query the database (so the registry
        # cannot check these names against its others').
        return []


@contextmanager
def _bounded():
    """Give each PostgreSQL statement run inside a bounded time: a table
    locked (a migration, a VACUUM FULL) or a hung database would otherwise
    hang the scrape, and every later one with it."""
    with ExitStack() as stack:
        timed: set[str] = set()

        def timing_out(execute, sql, params, many, context):
            alias = context["connection"].alias
            if alias not in timed:
                # Before entering: the atomic block's own SAVEPOINT passes here.
                timed.add(alias)
                stack.enter_context(_rolled_back(alias))
                # SET LOCAL, as a function: SET takes no server-side parameter.
                execute(
                    "SELECT set_config('statement_timeout', %s, true)",
                    [str(STATEMENT_TIMEOUT_MS)],
                    False,
                    context,
                )
            return execute(sql, params, many, context)

        for connection in connections.all():
            if connection.vendor == "postgresql":
                stack.enter_context(connection.execute_wrapper(timing_out))
        yield


@contextmanager
def _rolled_back(alias):
    """A transaction (a savepoint in a caller's) that the gauges only read
    in: rolled back, it takes the transaction-local timeout along."""
    with transaction.atomic(using=alias):
        yield
        transaction.set_rollback(True, using=alias)


# Weak: a registry's id could be reused by a new one once it is gone.
_registered: weakref.WeakSet = weakref.WeakSet()


def register(registry: CollectorRegistry = REGISTRY) -> None:
    """Add the gauges to ``registry`` (a project's own, such as the default
    one django-prometheus serves); once per registry."""
    if registry not in _registered:
        registry.register(GaugeCollector())
        _registered.add(registry)


def served_registry() -> CollectorRegistry:
    """What /metrics answers: the counters and histograms (every worker's, in
    multiprocess mode) and the gauges, read now."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # One process: its own registry, ours and whatever else it counts.
        register(REGISTRY)
        return REGISTRY
    registry = CollectorRegistry()
    # Each gunicorn worker writes its counts to files of its own there; this
    # sums them, whichever worker answers the scrape.
    multiprocess.MultiProcessCollector(registry)
    registry.register(GaugeCollector())
    return registry
