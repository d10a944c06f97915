"""Keyed POST vs the same POST without the mixin, and the replay.

In-process through the whole Django + DRF stack with real commits on
PostgreSQL; the three kinds are interleaved in rounds so drift hits all.
"""

import time
import uuid

from django.contrib.auth import get_user_model
from django.test import Client

from . import database
from .stats import median_ms, p95_ms, table

ROUNDS = 40
PER_ROUND = 50
WARMUP = 200
BODY = '{"sku": "BOOK-1", "quantity": 1}'


def run() -> str:
    database.prepare()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    client = Client()
    client.force_login(user)

    def post(path, key=None):
        headers = {"Idempotency-Key": key} if key else {}
        started = time.perf_counter_ns()
        response = client.post(
            path, BODY, content_type="application/json", headers=headers
        )
        elapsed = time.perf_counter_ns() - started
        assert response.status_code == 201, response.content
        return elapsed

    for _ in range(WARMUP):
        post("/baseline/orders/")
        post("/api/orders/", key=str(uuid.uuid4()))
    samples = {"baseline": [], "keyed": [], "replay": []}
    for _ in range(ROUNDS):
        keys = [str(uuid.uuid4()) for _ in range(PER_ROUND)]
        for key in keys:
            samples["baseline"].append(post("/baseline/orders/"))
            samples["keyed"].append(post("/api/orders/", key=key))
        for key in keys:
            samples["replay"].append(post("/api/orders/", key=key))

    base = median_ms(samples["baseline"])
    rows = [
        (name, f"{median_ms(s):.3f}", f"{p95_ms(s):.3f}", f"{median_ms(s) / base:.2f}x")
        for name, s in samples.items()
    ]
    return (
        "## Idempotency keys: keyed POST vs baseline\n\n"
        f"`POST /api/orders/` in-process (Django test client, session auth, "
        f"PostgreSQL, real commits), {ROUNDS} interleaved rounds of {PER_ROUND}. "
        "Both views do the demo's work: the order, its `order.created` outbox "
        "row and the relay kick on commit; the baseline is the same view "
        "without the mixin.\n"
        "Targets: keyed first request <= 1.3x baseline median; replay <= 0.6x.\n\n"
        + table(("request", "median ms", "p95 ms", "vs baseline median"), rows)
        + "\n"
    )
