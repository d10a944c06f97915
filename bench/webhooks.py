"""Webhook intake under gunicorn on loopback vs its floor and a bare 202 view.

The intake does the whole job (Stripe signature check, JSON parse, INSERT ...
ON CONFLICT on PostgreSQL with a real commit, the enqueue); the floor view is
the least a correct intake does (the same signature check and row, committed,
by hand); the bare view only reads the body. All run in the same gunicorn,
measured in interleaved order so drift hits all.
"""

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time

from . import clients, processes
from .charts import bar_chart
from .stats import median_ms, p95_ms, percentile_ms, table

WORKERS = 2
ROUNDS = 1500
WARMUP = 200
CLIENTS = 4
PER_CLIENT = 400
# Throughput is measured in this many interleaved bursts per endpoint (each
# of PER_CLIENT / BURSTS requests a client), so drift hits all endpoints.
BURSTS = 8
SECRET = "whsec_bench_stripe_secret"
ROOT = processes.ROOT
CHART = ROOT / "docs" / "bench-intake.svg"
ENDPOINTS = {
    "bare view": "/bare-webhook/stripe/",
    "floor view": "/floor-webhook/stripe/",
    "intake": "/webhooks/stripe/",
    "intake without enqueue": "/intake-no-enqueue/stripe/",
}


def run() -> str:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.webhooks_settings",
        "WEBHOOK_STRIPE_SECRET": SECRET,
    }
    _prepare(env)
    try:
        with processes.gunicorn(env, workers=WORKERS) as port:
            counter = iter(range(10**9))
            for _ in range(WARMUP):
                for path in ENDPOINTS.values():
                    _post(port, path, *_signed(next(counter)))
            latency = {name: [] for name in ENDPOINTS}
            for _ in range(ROUNDS):
                for name, path in ENDPOINTS.items():
                    latency[name].append(_post(port, path, *_signed(next(counter))))
            elapsed = dict.fromkeys(ENDPOINTS, 0.0)
            for _ in range(BURSTS):
                for name, path in ENDPOINTS.items():
                    elapsed[name] += _burst(port, path, counter)
            throughput = {
                name: CLIENTS * PER_CLIENT / seconds
                for name, seconds in elapsed.items()
            }
    finally:
        _flush_queue(env)
    base = median_ms(latency["bare view"])
    floor = median_ms(latency["floor view"])
    rows = [
        (
            name,
            f"{median_ms(samples):.3f}",
            f"{p95_ms(samples):.3f}",
            f"{percentile_ms(samples, 0.99):.3f}",
            f"{median_ms(samples) / base:.2f}x",
            f"{median_ms(samples) / floor:.2f}x",
            f"{throughput[name]:.0f}",
            f"{throughput[name] / throughput['floor view']:.2f}x",
        )
        for name, samples in latency.items()
    ]
    _chart(latency)
    return (
        "## Webhooks: intake vs its floor and a bare view answering 202\n\n"
        f"`POST /webhooks/stripe/` (verify + insert + enqueue) under gunicorn "
        f"({WORKERS} sync workers) on loopback, PostgreSQL with real commits. "
        "The floor view is the least a correct intake does: the same Stripe "
        "signature check and the same receipt row INSERTed and committed, by "
        "hand, then 202. The bare view only reads the body. Latency: "
        f"{ROUNDS} interleaved sequential rounds, a new TCP connection each; "
        f"throughput: {CLIENTS} concurrent clients x {PER_CLIENT} requests, "
        f"in {BURSTS} interleaved bursts. "
        f"Machine: {os.cpu_count()} CPUs shared by client, server, PostgreSQL "
        "and Redis. The intake's enqueue is the default drain kick: at most one "
        "Celery send per process per KICK_INTERVAL (250 ms), not one per "
        "delivery; a receipt's drain starts at most 250 ms after its commit "
        "(at worst 10 minutes, through beat's enqueue_waiting, if a kick is "
        "lost). The row without enqueue (verify + insert only) splits the "
        "broker's share from ours.\nTargets: intake median <= 1.25x the floor "
        "view's, throughput >= 0.8x the floor view's.\n\n"
        + table(
            (
                "endpoint",
                "median ms",
                "p95 ms",
                "p99 ms",
                "vs bare median",
                "vs floor median",
                "requests/s",
                "vs floor requests/s",
            ),
            rows,
        )
        + "\n\n![Intake latency percentiles: bare 202, floor, intake]"
        f"({CHART.name})\n"
    )


def _chart(latency):
    shown = ["bare view", "floor view", "intake"]
    bar_chart(
        CHART,
        "Webhook intake latency under gunicorn (lower is better)",
        ["p50", "p95", "p99"],
        [
            (
                name,
                [
                    percentile_ms(latency[name], fraction)
                    for fraction in (0.5, 0.95, 0.99)
                ],
            )
            for name in shown
        ],
        "ms",
    )


def _signed(n):
    body = json.dumps(
        {
            "id": f"evt_bench_{time.time_ns()}_{n}",
            "object": "event",
            "type": "payment_intent.created",
            "created": int(time.time()),
            "data": {"object": {"id": f"pi_{n}", "amount": 1000}},
        }
    ).encode()
    t = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), f"{t}.".encode() + body, hashlib.sha256)
    return body, {"Stripe-Signature": f"t={t},v1={digest.hexdigest()}"}


def _post(port, path, body, headers):
    headers = {"Content-Type": "application/json", **headers}
    return clients.timed_post(port, path, body, headers, expect=202)


def _burst(port, path, counter):
    """Seconds CLIENTS concurrent clients take for PER_CLIENT / BURSTS each."""
    # Sign up front: the clients measure the server, not HMAC in the client.
    batches = [
        [_signed(next(counter)) for _ in range(PER_CLIENT // BURSTS)]
        for _ in range(CLIENTS)
    ]
    return clients.seconds_for(batches, lambda signed: _post(port, path, *signed))


def _prepare(env):
    """Create and migrate once_bench_webhooks, then empty the receipts table."""
    code = (
        "import django; django.setup()\n"
        "from bench import database; database.prepare()\n"
        "from webhooks.models import WebhookReceipt, WebhookRejection\n"
        "WebhookReceipt.objects.all().delete(); WebhookRejection.objects.all().delete()"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)


def _flush_queue(env):
    # The bench runs no worker; drop what it enqueued from its own Redis db.
    code = (
        "import django; django.setup()\n"
        "from project.celery import app; app.control.purge()"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=False)
