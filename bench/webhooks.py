"""Webhook intake under gunicorn on loopback vs a bare view answering 202.

The intake does the whole job (Stripe signature check, JSON parse, INSERT ...
ON CONFLICT on PostgreSQL with a real commit, Celery enqueue to Redis); the
bare view only reads the body. All run in the same gunicorn, measured in
interleaved order so drift hits all.
"""

import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
import threading
import time

from . import processes
from .stats import median_ms, p95_ms, table

WORKERS = 2
ROUNDS = 1500
WARMUP = 200
CLIENTS = 4
PER_CLIENT = 400
SECRET = "whsec_bench_stripe_secret"
ROOT = processes.ROOT
ENDPOINTS = {
    "bare view": "/bare-webhook/stripe/",
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
                _post(port, "/bare-webhook/stripe/", *_signed(next(counter)))
                _post(port, "/webhooks/stripe/", *_signed(next(counter)))
            latency = {name: [] for name in ENDPOINTS}
            for _ in range(ROUNDS):
                for name, path in ENDPOINTS.items():
                    latency[name].append(_post(port, path, *_signed(next(counter))))
            throughput = {
                name: _throughput(port, path, counter)
                for name, path in ENDPOINTS.items()
            }
    finally:
        _flush_queue(env)
    base = median_ms(latency["bare view"])
    rows = [
        (
            name,
            f"{median_ms(samples):.3f}",
            f"{p95_ms(samples):.3f}",
            f"{median_ms(samples) / base:.2f}x",
            f"{throughput[name]:.0f}",
        )
        for name, samples in latency.items()
    ]
    return (
        "## Webhooks: intake vs a bare view answering 202\n\n"
        f"`POST /webhooks/stripe/` (verify + insert + enqueue to Redis) under "
        f"gunicorn ({WORKERS} sync workers) on loopback, PostgreSQL with real "
        f"commits. Latency: {ROUNDS} interleaved sequential rounds, a new TCP "
        f"connection each; throughput: {CLIENTS} concurrent clients x "
        f"{PER_CLIENT} requests. Machine: {os.cpu_count()} CPUs shared by client, "
        "server, PostgreSQL and Redis. The row without enqueue (verify + insert "
        "only) splits the broker's share from ours.\nTarget: intake median <= "
        "1.5x the bare view.\n\n"
        + table(
            ("endpoint", "median ms", "p95 ms", "vs bare median", "requests/s"),
            rows,
        )
        + "\n"
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
    """One request on a new connection (gunicorn's sync workers close each)."""
    started = time.perf_counter_ns()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(
        "POST", path, body, {"Content-Type": "application/json", **headers}
    )
    response = connection.getresponse()
    response.read()
    connection.close()
    elapsed = time.perf_counter_ns() - started
    if response.status != 202:
        raise RuntimeError(f"{path} answered {response.status}")
    return elapsed


def _throughput(port, path, counter):
    # Sign up front: the clients measure the server, not HMAC in the client.
    batches = [
        [_signed(next(counter)) for _ in range(PER_CLIENT)] for _ in range(CLIENTS)
    ]
    barrier = threading.Barrier(CLIENTS + 1)

    def client(batch):
        barrier.wait()
        for body, headers in batch:
            _post(port, path, body, headers)

    threads = [threading.Thread(target=client, args=(b,)) for b in batches]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return CLIENTS * PER_CLIENT / (time.perf_counter() - started)


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
