"""Mixed traffic under gunicorn with real workers, then the invariant check.

Keyed order POSTs (some sent twice, some with a changed payload) and signed
Stripe webhooks (some redelivered) for SECONDS against the idempotent orders
API, then the same traffic shape against the baseline view without the mixin.
After each phase the queues drain and the database is compared with what the
clients sent: every intent has its effect once.
"""

import base64
import http.client
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
import redis

from tests.webhooks.signing import stripe_headers

from . import processes
from .load_handlers import EFFECTS_TABLE
from .load_wsgi import KICKS
from .stats import percentile_ms, table

SECONDS = int(os.environ.get("BENCH_LOAD_SECONDS", 60))
CLIENTS = 8
GUNICORN_WORKERS = 3
CELERY_CONCURRENCY = 2
# The workers fall behind under full load; the backlog drains after it.
DRAIN_TIMEOUT = 120
# Shares of the traffic: webhooks among all requests; among order POSTs,
# resends of a key with the same payload and with a different one; among
# webhooks, redeliveries of an event id already sent.
WEBHOOK_SHARE = 0.25
DUPLICATE_SHARE = 0.10
MISMATCH_SHARE = 0.01
REDELIVERY_SHARE = 0.05
# Half the duplicates race the first send of their key; half come later.
CONCURRENT_DUPLICATES = 0.5
SKUS = ("BOOK-1", "BOOK-2", "MUG-1", "SHIRT-1")
ON_HAND = 1_000_000
PASSWORD = "bench-load-password"
SECRET = "whsec_bench_load_stripe_secret"
DATABASE_URL = os.environ.get(
    "BENCH_LOAD_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/once_bench_load"
)
BROKER_URL = os.environ.get("BENCH_LOAD_BROKER_URL", "redis://127.0.0.1:6379/14")
SUBSCRIBER = "shop.reserve-stock"
# (name, path, whether the view dedupes keys)
PHASES = (
    ("with IdempotencyMixin", "/api/orders/", True),
    ("baseline view, no mixin", "/baseline/orders/", False),
)
USERS = tuple(f"load-{n}" for n in range(CLIENTS))
# The keyed phase once more, with the relay kicked on every commit, as it was
# before kicks were coalesced (KICK_INTERVAL seconds).
PER_COMMIT_KICKS = ("with IdempotencyMixin, a relay kick per commit", 0.000001)

# Request kinds, as reported.
ORDER = "order, new key"
DUPLICATE = "order, same key and payload"
MISMATCH = "order, same key, other payload"
WEBHOOK = "webhook, new event"
REDELIVERY = "webhook, redelivery"
ORDERS = (ORDER, DUPLICATE, MISMATCH)
KINDS = (*ORDERS, WEBHOOK, REDELIVERY)


def run() -> str:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.load_settings",
        "BENCH_LOAD_DATABASE_URL": DATABASE_URL,
        "BENCH_LOAD_BROKER_URL": BROKER_URL,
        "WEBHOOK_STRIPE_SECRET": SECRET,
    }
    code = "import django; django.setup()\nfrom bench import load; load.prepare()"
    subprocess.run(
        [sys.executable, "-c", code], cwd=processes.ROOT, env=env, check=True
    )
    broker = redis.Redis.from_url(BROKER_URL)
    # Database 14 is the bench's own: nothing of an earlier run may linger.
    broker.flushdb()
    results = []
    try:
        with (
            _services(env) as port,
            psycopg.connect(DATABASE_URL, autocommit=True) as db,
        ):
            # Warm every gunicorn worker and the celery worker, then start clean.
            _drive(port, PHASES[0][1], seconds=2)
            _drained(db, broker)
            for name, path, keyed in PHASES:
                results.append(_phase(port, db, broker, name, path, keyed))
        name, interval = PER_COMMIT_KICKS
        per_commit = {**env, "BENCH_LOAD_KICK_INTERVAL": f"{interval:f}"}
        with (
            _services(per_commit) as port,
            psycopg.connect(DATABASE_URL, autocommit=True) as db,
        ):
            _drive(port, PHASES[0][1], seconds=2)
            _drained(db, broker)
            results.append(_phase(port, db, broker, name, PHASES[0][1], True))
    finally:
        broker.flushdb()
        broker.close()
    return _report(results)


def _phase(port, db, broker, name, path, keyed):
    """Drive one phase from a clean slate; return what the report needs."""
    _reset(db)
    broker.delete(KICKS)
    load_average = os.getloadavg()[0]
    ledger = _drive(port, path, seconds=SECONDS)
    ledger.load_average = load_average
    drain_seconds = _drained(db, broker)
    effects = _effects(db)
    effects["kicks"] = int(broker.get(KICKS) or 0)
    return name, keyed, ledger, drain_seconds, effects


def prepare():
    """In a child under bench.load_settings: database, effects table, users."""
    from django.contrib.auth.models import User
    from django.db import connection

    from . import database

    database.prepare()
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {EFFECTS_TABLE} (delivery_id text NOT NULL)"
        )
    for username in USERS:
        user, _ = User.objects.get_or_create(username=username)
        user.set_password(PASSWORD)  # hashed with the bench's MD5 hasher
        user.save()


@contextmanager
def _services(env):
    """gunicorn, a celery worker and celery beat; all stopped on the way out."""
    with tempfile.TemporaryDirectory() as scratch:
        started = []
        try:
            started.append(
                processes.start(
                    "celery",
                    "--app=project.celery",
                    "worker",
                    f"--concurrency={CELERY_CONCURRENCY}",
                    "--loglevel=warning",
                    "--without-gossip",
                    "--without-mingle",
                    env=env,
                )
            )
            started.append(
                processes.start(
                    "celery",
                    "--app=project.celery",
                    "beat",
                    "--loglevel=warning",
                    f"--schedule={scratch}/beat-schedule",
                    env=env,
                )
            )
            with processes.gunicorn(
                env, workers=GUNICORN_WORKERS, app="bench.load_wsgi:application"
            ) as port:
                yield port
        finally:
            for process in started:
                processes.stop(process)


@dataclass
class _Ledger:
    """What the clients sent and what they were answered; shared by threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    samples: list = field(default_factory=list)  # (kind, status, nanoseconds)
    # Order ids answered per (user, key): the mixin must answer one per key.
    answers: dict = field(default_factory=lambda: defaultdict(set))
    order_ids: list = field(default_factory=list)
    events: dict = field(default_factory=dict)  # event id -> body
    paid: set = field(default_factory=set)  # orders a payment event named
    elapsed: float = 0.0
    conflicts: int = 0  # 409s (request in flight), retried after Retry-After
    load_average: float = 0.0  # the machine's, as the phase started

    def add(self, kind, status, nanoseconds):
        with self.lock:
            self.samples.append((kind, status, nanoseconds))


def _drive(port, path, *, seconds):
    """Run CLIENTS threads of mixed traffic for ``seconds``; return the ledger."""
    ledger = _Ledger()
    deadline = time.monotonic() + seconds
    events = itertools.count()
    threads = [
        threading.Thread(
            target=_client,
            args=(port, path, user, random.Random(n), deadline, ledger, events),
        )
        for n, user in enumerate(USERS)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ledger.elapsed = time.perf_counter() - started
    return ledger


def _client(port, path, user, rng, deadline, ledger, events):
    auth = base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()
    headers = {"Authorization": f"Basic {auth}", "Content-Type": "application/json"}
    sent = []  # (key, payload) of this user's orders, for resends
    keys = (f"{user}-{n}" for n in itertools.count())

    def order(kind, key, payload):
        order_headers = {**headers, "Idempotency-Key": key}
        status, body = _order(port, path, kind, payload, order_headers, ledger)
        if 200 <= status < 300:
            order_id = json.loads(body)["id"]
            with ledger.lock:
                ledger.answers[user, key].add(order_id)
                ledger.order_ids.append(order_id)

    while time.monotonic() < deadline:
        if rng.random() < WEBHOOK_SHARE and ledger.order_ids:
            _webhook(port, rng, ledger, events)
            continue
        roll = rng.random()
        if sent and roll < MISMATCH_SHARE:
            key, payload = rng.choice(sent)
            order(MISMATCH, key, {**payload, "quantity": payload["quantity"] + 1})
        elif sent and roll < MISMATCH_SHARE + DUPLICATE_SHARE / 2:
            order(DUPLICATE, *rng.choice(sent[-50:]))
        else:
            key = next(keys)
            payload = {"sku": rng.choice(SKUS), "quantity": rng.randint(1, 3)}
            if roll < MISMATCH_SHARE + DUPLICATE_SHARE:
                # A client retrying before the first answer: both race.
                twin = threading.Thread(
                    target=order, args=(DUPLICATE, key, payload), daemon=True
                )
                twin.start()
                order(ORDER, key, payload)
                twin.join()
            else:
                order(ORDER, key, payload)
            sent.append((key, payload))


def _order(port, path, kind, payload, headers, ledger):
    # A 409 says the first send of the key is still running: a well-behaved
    # client waits Retry-After and asks again. Bounded to a few tries.
    for _ in range(5):
        status, body, response_headers = _post(
            port, path, json.dumps(payload).encode(), headers, kind, ledger
        )
        if status != 409:
            return status, body
        with ledger.lock:
            ledger.conflicts += 1
        time.sleep(float(response_headers.get("Retry-After", 1)))
    return status, body


def _webhook(port, rng, ledger, events):
    with ledger.lock:
        # bool(): the dict itself would turn truthy once other threads add to it.
        redeliver = bool(ledger.events) and rng.random() < REDELIVERY_SHARE
        if redeliver:
            body = rng.choice(list(ledger.events.values()))
        else:
            order_id = rng.choice(ledger.order_ids)
            event_id = f"evt_load_{time.time_ns()}_{next(events)}"
            body = _payment_succeeded(event_id, order_id)
    # Stripe signs every delivery anew, redeliveries too.
    headers = {"Content-Type": "application/json", **stripe_headers(body, SECRET)}
    kind = REDELIVERY if redeliver else WEBHOOK
    status, _, _ = _post(port, "/webhooks/stripe/", body, headers, kind, ledger)
    if not redeliver and status == 202:
        with ledger.lock:
            ledger.events[event_id] = body
            ledger.paid.add(order_id)


def _payment_succeeded(event_id, order_id):
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": "payment_intent.succeeded",
            "created": int(time.time()),
            "data": {
                "object": {
                    "id": f"pi_{event_id}",
                    "object": "payment_intent",
                    "metadata": {"order_id": str(order_id)},
                }
            },
        }
    ).encode()


def _post(port, path, body, headers, kind, ledger):
    """One POST on a new connection (gunicorn's sync workers close each)."""
    started = time.perf_counter_ns()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body, headers)
        response = connection.getresponse()
        answer = response.read()
        status = response.status
        response_headers = dict(response.getheaders())
    except (OSError, http.client.HTTPException):
        # Reset or timed out: counted with the 5xx, the server failed us.
        status, answer, response_headers = 599, b"", {}
    finally:
        connection.close()
    ledger.add(kind, status, time.perf_counter_ns() - started)
    return status, answer, response_headers


def _reset(db):
    db.execute(
        "TRUNCATE shop_order, shop_stock, outbox_message, inbox_message, "
        "webhooks_webhookreceipt, webhooks_webhookrejection, "
        f"idempotency_idempotencyrecord, {EFFECTS_TABLE}"
    )
    for sku in SKUS:
        db.execute(
            "INSERT INTO shop_stock (sku, on_hand, reserved) VALUES (%s, %s, 0)",
            [sku, ON_HAND],
        )


def _drained(db, broker):
    """Wait (bounded) until every event is applied; return the seconds it took.

    Done when the outbox has nothing pending, the consumer applied one event
    per order, every receipt is processed and the broker's queue is empty.
    """
    started = time.monotonic()
    while time.monotonic() - started < DRAIN_TIMEOUT:
        pending, orders, applied, unprocessed = db.execute(
            "SELECT (SELECT count(*) FROM outbox_message WHERE state = 'pending'),"
            " (SELECT count(*) FROM shop_order),"
            " (SELECT count(*) FROM inbox_message WHERE subscriber = %s),"
            " (SELECT count(*) FROM webhooks_webhookreceipt"
            "  WHERE state NOT IN ('processed', 'skipped'))",
            [SUBSCRIBER],
        ).fetchone()
        queued = broker.llen("celery") + broker.hlen("unacked")
        if not pending and applied >= orders and not unprocessed and not queued:
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def _effects(db):
    """What the database holds after the drain, for the invariant check."""
    row = db.execute(
        "SELECT (SELECT count(*) FROM shop_order),"
        " (SELECT coalesce(sum(quantity), 0) FROM shop_order),"
        " (SELECT count(*) FROM shop_order WHERE status = 'paid'),"
        " (SELECT count(*) FROM inbox_message WHERE subscriber = %s),"
        " (SELECT coalesce(sum(inbox.duplicates), 0) FROM inbox_message inbox),"
        " (SELECT count(*) FROM outbox_message WHERE state = 'published'),"
        " (SELECT coalesce(sum(%s - on_hand), 0) FROM shop_stock),"
        " (SELECT coalesce(sum(reserved), 0) FROM shop_stock),"
        " (SELECT count(*) FROM webhooks_webhookreceipt),"
        " (SELECT count(*) FROM webhooks_webhookreceipt WHERE state = 'processed'),"
        f" (SELECT count(*) FROM {EFFECTS_TABLE}),"
        f" (SELECT count(DISTINCT delivery_id) FROM {EFFECTS_TABLE})",
        [SUBSCRIBER, ON_HAND],
    ).fetchone()
    names = (
        "orders",
        "quantity",
        "paid",
        "applied",
        "inbox_duplicates",
        "published",
        "decremented",
        "reserved",
        "receipts",
        "processed",
        "effects",
        "distinct_effects",
    )
    return dict(zip(names, row, strict=True))


def _report(results):
    lines = [
        "## Load and soak: mixed traffic, then the invariant check",
        "",
        f"{SECONDS} s per phase of {CLIENTS} client threads (Python, http.client, "
        f"a new connection per request) against gunicorn ({GUNICORN_WORKERS} sync "
        f"workers) on loopback, PostgreSQL `once_bench_load`, a celery worker "
        f"(prefork, {CELERY_CONCURRENCY} processes) and celery beat on Redis "
        f"({BROKER_URL}). Machine: {os.cpu_count()} CPUs shared by clients, "
        "servers, workers, PostgreSQL and Redis. Clients authenticate with HTTP "
        "Basic on every request; the bench hashes passwords with MD5 "
        "(`MD5PasswordHasher`), since PBKDF2 would dominate each request.",
        "",
        f"Traffic: {WEBHOOK_SHARE:.0%} signed Stripe `payment_intent.succeeded` "
        f"webhooks for orders already created ({REDELIVERY_SHARE:.0%} of them "
        f"redeliveries of an event id), the rest keyed order POSTs: "
        f"{DUPLICATE_SHARE:.0%} resend a key with the same payload (half of "
        f"those race the first send), {MISMATCH_SHARE:.0%} resend one with a "
        "different payload. The same shape then runs against the baseline view "
        "(the same serializer and `orders.place()`, no mixin). After each phase "
        f"the queues drain (at most {DRAIN_TIMEOUT} s) before the check.",
        "",
    ]
    surplus = {}
    for name, keyed, ledger, drain_seconds, effects in results:
        lines += _phase_report(name, keyed, ledger, drain_seconds, effects)
        # The first phase of each kind: the per-commit kick phase repeats one.
        surplus.setdefault(
            keyed, (effects["orders"] - len(ledger.answers), len(ledger.answers))
        )
    lines += [
        "### Relay kicks",
        "",
        "Relay tasks (`outbox.relay`) the web processes sent, counted by a "
        "Celery `after_task_publish` handler in each gunicorn worker (beat's "
        "safety-net runs are not counted), per event recorded. The last phase "
        f"sets `KICK_INTERVAL` to {PER_COMMIT_KICKS[1] * 1e6:.0f} µs (0 is "
        "refused), which kicks on every commit as before coalescing.",
        "",
        table(
            ("phase", "events", "relay tasks sent", "per event"),
            [
                (
                    name,
                    f"{effects['published']:,}",
                    f"{effects['kicks']:,}",
                    f"{effects['kicks'] / max(1, effects['published']):.3f}",
                )
                for name, _, _, _, effects in results
            ],
        ),
        "",
    ]
    lines += [
        "### What the mixin prevents",
        "",
        f"Baseline: {surplus[False][0]:,} orders more than distinct keys "
        f"({surplus[False][1]:,} keys), each reserving stock again; with the "
        f"mixin: {surplus[True][0]:,} more than {surplus[True][1]:,} keys.",
        "",
    ]
    return "\n".join(lines)


def _phase_report(name, keyed, ledger, drain_seconds, effects):
    by_kind = defaultdict(list)
    statuses = defaultdict(Counter)
    for kind, status, nanoseconds in ledger.samples:
        by_kind[kind].append(nanoseconds)
        statuses[kind][status] += 1
    every = [nanoseconds for _, _, nanoseconds in ledger.samples]
    rows = [
        _latency_row(kind, samples, ledger.elapsed, statuses[kind])
        for kind, samples in ((kind, by_kind[kind]) for kind in KINDS)
        if samples
    ]
    rows.append(_latency_row("**all**", every, ledger.elapsed, Counter()))
    drained = (
        f"queues drained {drain_seconds:.1f} s after the clients stopped"
        if drain_seconds is not None
        else f"**queues not drained after {DRAIN_TIMEOUT} s**"
    )
    return [
        f"### {name}",
        "",
        f"{len(every):,} requests in {ledger.elapsed:.1f} s "
        f"({len(every) / ledger.elapsed:.1f} req/s), {_errors(ledger):,} 5xx, "
        f"{ledger.conflicts:,} answered 409 and retried; {drained}. Load "
        f"average as it started: {ledger.load_average:.1f}.",
        "",
        table(("kind", "requests", "req/s", "p50 ms", "p99 ms", "statuses"), rows),
        "",
        table(
            ("invariant", "expected", "found", "result"),
            _invariants(keyed, ledger, effects),
        ),
        "",
    ]


def _latency_row(kind, samples, elapsed, statuses):
    return (
        kind,
        f"{len(samples):,}",
        f"{len(samples) / elapsed:.1f}",
        f"{percentile_ms(samples, 0.50):.1f}",
        f"{percentile_ms(samples, 0.99):.1f}",
        ", ".join(f"{status}: {n:,}" for status, n in sorted(statuses.items())),
    )


def _errors(ledger):
    return sum(1 for _, status, _ in ledger.samples if status >= 500)


def _invariants(keyed, ledger, effects):
    answered = Counter((kind, status // 100) for kind, status, _ in ledger.samples)
    orders = effects["orders"]
    if keyed:
        split = sum(1 for ids in ledger.answers.values() if len(ids) > 1)
        unprocessable = sum(
            1 for kind, status, _ in ledger.samples if (kind, status) == (MISMATCH, 422)
        )
        checks = [
            ("orders = distinct keys accepted", len(ledger.answers), orders),
            ("keys answered with more than one order id", 0, split),
            (
                "422s = same-key-different-payload sends",
                sum(n for (kind, _), n in answered.items() if kind == MISMATCH),
                unprocessable,
            ),
        ]
    else:
        # Without the mixin every accepted send is an order, resends included.
        created = sum(
            n
            for (kind, family), n in answered.items()
            if kind in ORDERS and family == 2
        )
        checks = [("orders = accepted order sends (no dedup)", created, orders)]
    events = len(ledger.events)
    checks += [
        ("outbox events published = orders", orders, effects["published"]),
        ("events the consumer applied = orders", orders, effects["applied"]),
        (
            "stock decrements = ordered quantity",
            effects["quantity"],
            effects["decremented"],
        ),
        ("stock reserved = ordered quantity", effects["quantity"], effects["reserved"]),
        ("webhook receipts = distinct event ids", events, effects["receipts"]),
        ("receipts processed", events, effects["processed"]),
        ("handler runs = distinct event ids", events, effects["effects"]),
        ("event ids with a handler run", events, effects["distinct_effects"]),
        ("orders paid = orders a payment named", len(ledger.paid), effects["paid"]),
        ("5xx answers", 0, _errors(ledger)),
    ]
    return [
        (label, f"{expected:,}", f"{found:,}", "PASS" if expected == found else "FAIL")
        for label, expected, found in checks
    ]
