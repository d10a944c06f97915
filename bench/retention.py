"""Purge a million expired keys while a writer keeps claiming new ones."""

import multiprocessing
import os
import time
import uuid
from datetime import timedelta

from django.db import connection, connections, transaction

from idempotency.models import IdempotencyRecord
from idempotency.shared import clock, retention
from idempotency.shared.retention import DEFAULT_PAUSE

from . import database
from .stats import median_ms, percentile_ms, table

ROWS = 1_000_000
BATCH_SIZE = 1000
# Long enough for a p99 of the writer alone (about 1,000 inserts).
BASELINE_SECONDS = 5
# The writer's p99 insert during the purge against its p99 alone, same run.
P99_TARGET = 2.0
# The purge with its default rest after each batch (seconds), then flat out.
PAUSES = (float(os.environ.get("BENCH_PURGE_PAUSE", DEFAULT_PAUSE)), 0.0)


def fill_expired(rows=ROWS):
    """Insert ``rows`` expired completed keys server-side, in one statement."""
    table_name = IdempotencyRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table_name}")
        cursor.execute(
            f"INSERT INTO {table_name} (scope, operation, key, request_hash, state, "
            "status_code, response_body, response_headers, resource_type, "
            "resource_id, attempts, created_at, completed_at, expires_at) "
            "SELECT 'user:' || (n %% 1000), 'bench.purge', 'old-' || n, "
            "md5(n::text) || md5(n::text), 'completed', 201, "
            "convert_to('{\"id\": ' || n || '}', 'UTF8'), "
            "'{\"Content-Type\": \"application/json\"}', '', '', 1, "
            "now() - interval '2 days', now() - interval '2 days', "
            "now() - interval '1 day' FROM generate_series(1, %s) AS n",
            [rows],
        )
        cursor.execute(f"VACUUM ANALYZE {table_name}")
        # The fill's WAL is flushed now, not by a checkpoint during the purge:
        # its writes would stall the writer and be charged to the purge.
        cursor.execute("CHECKPOINT")


def claim_new_key():
    """One writer step: the claim a keyed request makes, in its transaction."""
    now = clock.now()
    with transaction.atomic():
        IdempotencyRecord.objects.claim(
            scope="user:writer",
            operation="bench.write",
            key=str(uuid.uuid4()),
            request_hash="0" * 64,
            now=now,
            expires_at=now + timedelta(hours=24),
            lock_timeout_ms=1000,
        )


def _writer(stop, started, results):
    """A separate process, like a web worker: claims new keys until told to stop,
    then sends back its latencies (ns) and how many came before the purge."""
    latencies, before = [], None
    try:
        while not stop.is_set():
            if before is None and started.is_set():
                before = len(latencies)
            began = time.perf_counter_ns()
            claim_new_key()
            latencies.append(time.perf_counter_ns() - began)
            time.sleep(0.002)
    finally:
        connections.close_all()
        results.put((latencies, before or 0))


def run() -> str:
    database.prepare()
    runs = {pause: _purge_beside_writer(pause) for pause in PAUSES}
    names = {pause: _name(pause) for pause in PAUSES}
    rows = [
        (figure, *(runs[pause][figure] for pause in PAUSES))
        for figure in runs[PAUSES[0]]
    ]
    return (
        f"## Retention: purge {ROWS:,} expired keys under write load\n\n"
        f"`retention.purge(only=['idempotency'], batch_size={BATCH_SIZE})` on "
        "PostgreSQL while a separate writer process claims new keys (insert + "
        f"commit) every 2 ms; the writer runs alone for {BASELINE_SECONDS} s "
        "first, in the same run. With the default `pause` (`--pause`: a rest "
        "after each full batch), then flat out (`--pause 0`), each on a fresh "
        "fill.\n\n" + table(("figure", *names.values()), rows) + "\n"
    )


def _name(pause: float) -> str:
    if not pause:
        return "flat out (pause 0)"
    default = " (the default)" if pause == DEFAULT_PAUSE else ""
    return f"pause {pause * 1000:g} ms{default}"


def _purge_beside_writer(pause: float) -> dict[str, str]:
    fill_expired()
    # The writer must not share this process's connection (or its GIL).
    connections.close_all()
    context = multiprocessing.get_context("fork")
    stop, started, results = context.Event(), context.Event(), context.Queue()
    writer = context.Process(target=_writer, args=(stop, started, results))
    writer.start()
    time.sleep(BASELINE_SECONDS)  # the writer's baseline before the purge starts
    started.set()
    began = time.perf_counter()
    counts = retention.purge(only=["idempotency"], batch_size=BATCH_SIZE, pause=pause)
    elapsed = time.perf_counter() - began
    stop.set()
    latencies, before = results.get(timeout=30)
    writer.join(30)
    during, alone = latencies[before:], latencies[:before]

    deleted = counts["idempotency"]
    ratio = percentile_ms(during, 0.99) / percentile_ms(alone, 0.99)
    verdict = "met" if ratio <= P99_TARGET else "missed"
    return {
        "keys deleted": f"{deleted:,}",
        "purge time": f"{elapsed:.1f} s",
        "rows/s": f"{deleted / elapsed:,.0f}",
        "writer inserts alone, then during purge": f"{len(alone):,}, {len(during):,}",
        "writer median insert alone": f"{median_ms(alone):.2f} ms",
        "writer median insert during purge": f"{median_ms(during):.2f} ms",
        "writer p99 insert alone": f"{percentile_ms(alone, 0.99):.2f} ms",
        "writer p99 insert during purge": f"{percentile_ms(during, 0.99):.2f} ms",
        "p99 during purge vs alone": (
            f"{ratio:.2f}x (target <= {P99_TARGET:.0f}x: {verdict})"
        ),
        "writer worst insert during purge": f"{max(during) / 1e6:.1f} ms",
    }
