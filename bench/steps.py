"""Durable steps: what a step adds to an outside call, and steps mode's cost.

A step is the call plus its recovery point: one statement that updates the
unit's lease (the fence) and inserts the step's row. Measured
against the bare call (a keep-alive HTTP request to a tiny server on
loopback), a no-op step, and one autocommitted indexed INSERT: the target
is that a step adds no more than that INSERT's round trip, <= 0.3 ms. Then
a keyed request in steps mode (its order written by an atomic step) against
the same view in lease mode, in-process, interleaved.
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
    added = median_ms(calls[STEPPED]) - median_ms(calls[BARE])
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
        f"ms. Added here: {added:.3f} ms ({verdict}).\n\n"
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
    samples: dict[str, list[int]] = {BARE: [], STEPPED: [], NOOP: [], INSERT: []}
    for number in range(ROUNDS + WARMUP // PER_ROUND):
        unit = units.Unit(units.KEYS, ("bench", "steps", str(uuid.uuid4())))
        handle = steps.begin(unit, "bench", lease=LEASE)
        round_samples = {
            BARE: [_timed(call, unit.derive(f"b{i}")) for i in range(PER_ROUND)],
            STEPPED: [_timed(handle.step, f"s{i}", call) for i in range(PER_ROUND)],
            NOOP: [_timed(handle.step, f"n{i}", noop) for i in range(PER_ROUND)],
            INSERT: [_timed(_insert, unit.identity, i) for i in range(PER_ROUND)],
        }
        if number >= WARMUP // PER_ROUND:
            for name, values in round_samples.items():
                samples[name].extend(values)
    http_connection.close()
    return samples


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
