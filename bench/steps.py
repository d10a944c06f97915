"""Durable steps: what a step adds to an outside call, and steps mode's cost.

A step is the call plus its recovery point: one statement that updates the
unit's lease (the fence) and inserts the step's row. Measured
against the bare call (a keep-alive HTTP request to a tiny server on
loopback), a no-op step, and one autocommitted indexed INSERT: the target
is that a step adds no more than that INSERT's round trip, <= 0.3 ms. The
recovery point's own statement, sent alone on the steps' connection by
psycopg and through Django's cursor, is the step's floor: the no-op step's
time over it is the steps' Python. Then a keyed request in
steps mode (its order written by an atomic step) against the same view in
lease mode, in-process, interleaved.
"""

import http.client
import http.server
import os
import threading
import time
import uuid
from datetime import timedelta

from django.db import connection
from django.test import Client, override_settings

from idempotency.shared import steps, units
from idempotency.shared.steps.handle import point_statement

from . import database
from .idempotency import BODY, _bench_user
from .stats import median_ms, p95_ms, table

ROUNDS = 30
PER_ROUND = 50
WARMUP = 300
LEASE = timedelta(seconds=30)
TARGET_MS = 0.3

BARE = "bare HTTP call"
STEPPED = "the call as a step"
NOOP = "no-op step"
POINT = "its recovery point alone (psycopg)"
DJANGO_POINT = "its recovery point alone (Django cursor)"
INSERT = "one indexed INSERT (autocommit)"
LEASED = "keyed, lease"
STEPS_MODE = "keyed, steps (one atomic step)"
REQUESTS = {LEASED: "/leased/orders/", STEPS_MODE: "/stepped/orders/"}


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the call, not a TCP handshake
    disable_nagle_algorithm = True  # headers and body leave at once

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def run() -> str:
    database.prepare()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        calls = _steps(server.server_address[1])
    finally:
        server.shutdown()
    requests = _requests()
    load = os.getloadavg()[0]
    median = {name: median_ms(values) for name, values in calls.items()}
    added = median[STEPPED] - median[BARE]
    verdict = "met" if added <= TARGET_MS else "missed"
    return (
        "## Durable steps: a step's cost, and steps mode vs lease mode\n\n"
        "A step runs its call outside any transaction, then commits its "
        "recovery point: on PostgreSQL one autocommitted statement that "
        "renews the unit's lease, fenced on its attempt, and inserts the "
        "step's row (a CTE). The bare call is a keep-alive "
        "HTTP POST to a tiny server on loopback; the no-op step calls nothing. "
        f"{ROUNDS} interleaved rounds of {PER_ROUND}, real commits on "
        f"PostgreSQL, load average {load:.2f}.\n"
        f"Target: a step adds <= one indexed INSERT round trip, <= {TARGET_MS} "
        f"ms. Added here: {added:.3f} ms ({verdict}).\n"
        "The floor: the no-op step's recovery point, its statement and "
        "parameters as the step sends them, sent alone on the same connection "
        "by psycopg (autocommit, client-side binding, as `bench.floors`) and "
        "through Django's cursor, as the INSERT is. Through Django's cursor the "
        f"statement costs {median[DJANGO_POINT] - median[INSERT]:+.3f} ms over "
        "the INSERT (psycopg alone: "
        f"{median[DJANGO_POINT] - median[POINT]:+.3f} ms for Django's cursor); "
        f"the no-op step {median[NOOP] - median[DJANGO_POINT]:+.3f} ms over "
        "it: the steps' own Python.\n\n"
        + _table(calls, BARE)
        + "\n\nA keyed `POST` creating one order, in-process (Django test "
        "client, session auth): lease mode writes it inside the view's one "
        "transaction, steps mode in an atomic step (its recovery point in the "
        "same transaction), after joining the unit's row. "
        f"{ROUNDS} interleaved rounds of {PER_ROUND}:\n\n"
        + _table(requests, LEASED)
        + "\n"
    )


def _steps(port):
    http_connection = http.client.HTTPConnection("127.0.0.1", port)

    def call(key):
        http_connection.request("POST", "/charge", body=key)
        http_connection.getresponse().read()
        return {"charge": key[:12]}

    def noop(key):
        return None

    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_insert_floor (id bigserial "
            "PRIMARY KEY, unit text NOT NULL, name text NOT NULL, "
            "UNIQUE (unit, name))"
        )
    samples: dict[str, list[int]] = {
        name: [] for name in (BARE, STEPPED, NOOP, DJANGO_POINT, POINT, INSERT)
    }
    for number in range(ROUNDS + WARMUP // PER_ROUND):
        unit = units.Unit(units.KEYS, ("bench", "steps", str(uuid.uuid4())))
        handle = steps.begin(unit, "bench", lease=LEASE)
        round_samples = {
            BARE: [_timed(call, unit.derive(f"b{i}")) for i in range(PER_ROUND)],
            STEPPED: [_timed(handle.step, f"s{i}", call) for i in range(PER_ROUND)],
            NOOP: [_timed(handle.step, f"n{i}", noop) for i in range(PER_ROUND)],
            DJANGO_POINT: [
                _point(connection.cursor, handle, f"d{i}") for i in range(PER_ROUND)
            ],
            POINT: [
                _point(connection.connection.cursor, handle, f"p{i}")
                for i in range(PER_ROUND)
            ],
            INSERT: [_timed(_insert, unit.identity, i) for i in range(PER_ROUND)],
        }
        if number >= WARMUP // PER_ROUND:
            for name, values in round_samples.items():
                samples[name].extend(values)
    http_connection.close()
    return samples


def _point(cursor, handle, name):
    """A no-op step's recovery point, sent alone through ``cursor``: the
    statement and parameters its step sends, prepared before the clock
    starts."""
    sql, params = point_statement(connection, **handle._recovery_point(name, None))
    started = time.perf_counter_ns()
    with cursor() as opened:
        opened.execute(sql, params)
        if opened.fetchone() is None:
            raise RuntimeError(f"The recovery point of {name!r} was fenced out")
    return time.perf_counter_ns() - started


def _insert(unit, number):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO bench_insert_floor (unit, name) VALUES (%s, %s)",
            [unit, f"i{number}"],
        )


def _requests():
    samples: dict[str, list[int]] = {name: [] for name in REQUESTS}
    with override_settings(ROOT_URLCONF="bench.steps_urls"):
        client = Client()
        client.force_login(_bench_user())
        for number in range(ROUNDS + WARMUP // PER_ROUND):
            for name, path in REQUESTS.items():
                values = [_post(client, path) for _ in range(PER_ROUND)]
                if number >= WARMUP // PER_ROUND:
                    samples[name].extend(values)
    return samples


def _post(client, path):
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    started = time.perf_counter_ns()
    response = client.post(path, BODY, content_type="application/json", headers=headers)
    elapsed = time.perf_counter_ns() - started
    if response.status_code != 201:
        raise RuntimeError(f"{path} answered {response.status_code}")
    return elapsed


def _timed(func, *args):
    started = time.perf_counter_ns()
    func(*args)
    return time.perf_counter_ns() - started


def _table(samples, base):
    reference = median_ms(samples[base])
    rows = [
        (
            name,
            f"{median_ms(values):.3f}",
            f"{p95_ms(values):.3f}",
            f"{median_ms(values) - reference:+.3f}",
        )
        for name, values in samples.items()
    ]
    return table(("what", "median ms", "p95 ms", f"vs {base}, ms"), rows)
