"""Render the operations dashboard with a million rows in each table."""

import time

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from idempotency.models import IdempotencyRecord
from inbox.models import InboxMessage
from outbox.models import OutboxMessage
from webhooks.models import WebhookReceipt

from . import database
from .stats import median_ms, p95_ms, table

ROWS = 1_000_000
RENDERS = 30
LIST_RENDERS = 5
# The console's lists, filtered and searched the ways an operator would.
LISTS = (
    "/admin/idempotency/idempotencyrecord/",
    "/admin/idempotency/idempotencyrecord/?state__exact=failed",
    "/admin/idempotency/idempotencyrecord/?lease=stuck",
    "/admin/idempotency/idempotencyrecord/?scope=user:7",
    "/admin/idempotency/idempotencyrecord/?operation=op.3",
    "/admin/idempotency/idempotencyrecord/?q=k-5",
    "/admin/idempotency/idempotencyrecord/?retention=past",
    "/admin/outbox/outboxmessage/",
    "/admin/outbox/outboxmessage/?state__exact=dead",
    "/admin/outbox/outboxmessage/?q=77",
    "/admin/outbox/outboxmessage/?retention=past",
    "/admin/inbox/inboxmessage/?duplicates=yes",
    "/admin/inbox/inboxmessage/?q=5",
    "/admin/webhooks/webhookreceipt/",
    "/admin/webhooks/webhookreceipt/?source__exact=stripe",
    "/admin/webhooks/webhookreceipt/?state__exact=failed&source__exact=github",
    "/admin/webhooks/webhookreceipt/?q=d-5",
)

# Each table gets ROWS rows spread over a week, in a realistic mix of states.
FILL = {
    IdempotencyRecord: (
        "(scope, operation, key, request_hash, state, status_code, response_body, "
        "response_headers, resource_type, resource_id, attempts, locked_until, "
        "created_at, completed_at, expires_at)",
        "SELECT 'user:' || (n %% 5000), 'op.' || (n %% 7), 'k-' || n, md5(n::text), "
        "CASE WHEN n %% 1000 = 0 THEN 'pending' WHEN n %% 97 = 0 THEN 'failed' "
        "ELSE 'completed' END, 201, '\\x7b7d'::bytea, '{}'::jsonb, '', '', 1, "
        "CASE WHEN n %% 1000 = 0 THEN now() - interval '1 minute' END, "
        "now() - (n %% 604800) * interval '1 second', now(), "
        "now() + interval '1 day' - (n %% 604800) * interval '1 second'",
    ),
    OutboxMessage: (
        "(id, aggregatetype, aggregateid, type, payload, headers, state, created_at, "
        "available_at, published_at, attempts, requeued_at_attempt, last_error, "
        "tracingspancontext)",
        "SELECT md5(n::text)::uuid, 'order', (n %% 100000)::text, 'order.created', "
        "'{}'::jsonb, '{}'::jsonb, CASE WHEN n %% 5000 = 0 THEN 'dead' "
        "WHEN n %% 1000 = 0 THEN 'pending' ELSE 'published' END, "
        "now() - (n %% 604800) * interval '1 second', now(), "
        "now() - (n %% 604800) * interval '1 second', 1, 0, '', ''",
    ),
    InboxMessage: (
        "(subscriber, message_id, received_at, duplicates, state)",
        "SELECT 'shop.reserve_stock', md5(n::text), "
        "now() - (n %% 604800) * interval '1 second', "
        "CASE WHEN n %% 100 = 0 THEN 1 ELSE 0 END, "
        "CASE WHEN n %% 5000 = 0 THEN 'dead' ELSE 'applied' END",
    ),
    WebhookReceipt: (
        "(source, delivery_id, event_type, headers, body, body_sha256, state, "
        "attempts, worker_deaths, last_error, received_at, processed_at)",
        "SELECT (ARRAY['github', 'stripe', 'standard'])[1 + n %% 3], 'd-' || n, "
        "'push', '{}'::jsonb, '\\x7b7d'::bytea, "
        # GitHub's delivery ids are unsigned: its receipts keep a body hash.
        "CASE WHEN n %% 3 = 0 THEN encode(sha256(('d-' || n)::bytea), 'hex') "
        "ELSE '' END, "
        "CASE WHEN n %% 500 = 0 THEN 'failed' "
        "WHEN n %% 7 = 0 THEN 'skipped' ELSE 'processed' END, 1, 0, '', "
        "now() - (n %% 604800) * interval '1 second', now()",
    ),
}


def fill(rows=ROWS):
    with connection.cursor() as cursor:
        for model, (columns, select) in FILL.items():
            name = model._meta.db_table
            cursor.execute(f"TRUNCATE {name}")
            cursor.execute(
                f"INSERT INTO {name} {columns} {select} "
                "FROM generate_series(1, %s) AS n",
                [rows],
            )
            cursor.execute(f"VACUUM ANALYZE {name}")


def run() -> str:
    database.prepare()
    fill()
    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    for _ in range(3):
        assert client.get("/admin/ops/").status_code == 200
    samples = []
    for _ in range(RENDERS):
        started = time.perf_counter_ns()
        response = client.get("/admin/ops/")
        samples.append(time.perf_counter_ns() - started)
        assert response.status_code == 200
    rows = [
        (
            "dashboard render",
            f"{median_ms(samples):.1f}",
            f"{p95_ms(samples):.1f}",
            f"{max(samples) / 1e6:.1f}",
        )
    ]
    rows += [_time_list(client, url) for url in LISTS]
    with connection.cursor() as cursor:
        for model in FILL:
            cursor.execute(f"TRUNCATE {model._meta.db_table}")
    return (
        "## Operations dashboard with 1,000,000 rows per table\n\n"
        "`GET /admin/ops/` in-process as a superuser; keys, outbox messages, inbox "
        "rows and webhook receipts 1,000,000 each, spread over a week "
        f"(0.1% pending, dead and failed rows among them), {RENDERS} renders.\n"
        "Target: <= 300 ms. Then each console list, filtered and searched, "
        f"{LIST_RENDERS} renders each.\n\n"
        + table(("request", "median ms", "p95 ms", "max ms"), rows)
        + "\n"
    )


def _time_list(client, url):
    client.get(url)
    samples = []
    for _ in range(LIST_RENDERS):
        started = time.perf_counter_ns()
        response = client.get(url)
        samples.append(time.perf_counter_ns() - started)
        assert response.status_code == 200, url
    return (
        f"`{url.removeprefix('/admin/')}`",
        f"{median_ms(samples):.1f}",
        f"{p95_ms(samples):.1f}",
        f"{max(samples) / 1e6:.1f}",
    )
