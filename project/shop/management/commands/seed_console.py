"""Give the operations console something in every state; safe to run again."""

import json
import uuid
from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import transaction

from idempotency.models import IdempotencyRecord
from idempotency.shared import clock
from inbox.models import InboxMessage
from outbox.models import OutboxMessage
from webhooks.models import WebhookReceipt, WebhookRejection

OPERATION = "demo.seeded"


class Command(BaseCommand):
    help = "Seed keys, outbox and inbox messages and receipts in every state."

    @transaction.atomic
    def handle(self, *args, **options):
        if IdempotencyRecord.objects.filter(operation=OPERATION).exists():
            self.stdout.write("Console data already seeded.")
            return
        now = clock.now()
        self._keys(now)
        self._outbox(now)
        self._inbox(now)
        self._webhooks(now)
        self._activity(now)
        self.stdout.write("Seeded the console: keys, messages and receipts.")

    def _activity(self, now):
        """A day of traffic so the dashboard's chart has a shape."""
        keys, events, receipts = [], [], []
        for hour in range(1, 24):
            at = now - timedelta(hours=hour, minutes=7)
            for n in range(3 + (hour * 7) % 11):
                keys.append(
                    IdempotencyRecord(
                        scope="user:demo",
                        operation=OPERATION,
                        key=f"seed-{hour}-{n}",
                        request_hash="0" * 64,
                        state="completed",
                        status_code=201,
                        response_body=b"{}",
                        created_at=at,
                        completed_at=at,
                        expires_at=at + timedelta(days=1),
                        response_headers={"Content-Type": "application/json"},
                    )
                )
                if n % 2 == 0:
                    events.append(
                        OutboxMessage(
                            aggregatetype="demo",
                            aggregateid="seed",
                            type=OPERATION,
                            payload={},
                            state="published",
                            created_at=at,
                            available_at=at,
                            published_at=at,
                            attempts=1,
                        )
                    )
                if n % 3 == 0:
                    receipts.append(
                        WebhookReceipt(
                            source="stripe",
                            delivery_id=f"evt_seed_{hour}_{n}",
                            event_type="payment_intent.succeeded",
                            body=b"{}",
                            state="processed",
                            attempts=1,
                            received_at=at,
                            processed_at=at,
                        )
                    )
        IdempotencyRecord.objects.bulk_create(keys)
        OutboxMessage.objects.bulk_create(events)
        WebhookReceipt.objects.bulk_create(receipts)

    def _keys(self, now):
        day = timedelta(days=1)
        rows = [
            # key, state, created ago, expires in, lease left
            ("seed-completed", "completed", timedelta(hours=2), day, None),
            (
                "seed-in-flight",
                "pending",
                timedelta(seconds=5),
                day,
                timedelta(seconds=25),
            ),
            (
                "seed-stuck",
                "pending",
                timedelta(minutes=20),
                day,
                -timedelta(minutes=19),
            ),
            ("seed-failed", "failed", timedelta(hours=1), day, None),
            ("seed-expired", "completed", timedelta(days=2), -timedelta(hours=1), None),
        ]
        body = json.dumps({"id": 0, "sku": "BOOK-1", "quantity": 1}).encode()
        IdempotencyRecord.objects.bulk_create(
            IdempotencyRecord(
                scope="user:demo",
                operation=OPERATION,
                key=key,
                request_hash="0" * 64,
                state=state,
                created_at=now - ago,
                expires_at=now + expires,
                locked_until=now + lease if lease else None,
                status_code=201 if state == "completed" else None,
                response_body=body if state == "completed" else None,
                response_headers={"Content-Type": "application/json"},
                attempts=3 if key == "seed-failed" else 1,
            )
            for key, state, ago, expires, lease in rows
        )

    def _outbox(self, now):
        def message(state, **extra):
            created = extra.pop("created_at", now - timedelta(minutes=30))
            return OutboxMessage(
                id=uuid.uuid4(),
                aggregatetype="demo",
                aggregateid="seed",
                type=OPERATION,
                payload={"seeded": True},
                state=state,
                created_at=created,
                available_at=extra.pop("available_at", created),
                **extra,
            )

        OutboxMessage.objects.bulk_create(
            [
                message("published", published_at=now - timedelta(minutes=29)),
                message(
                    "published",
                    created_at=now - timedelta(days=8),
                    published_at=now - timedelta(days=8),
                ),
                message(
                    "pending",
                    attempts=4,
                    last_error="ConnectionError: broker down",
                    available_at=now + timedelta(minutes=10),
                ),
                message("dead", attempts=10, last_error="ConnectionError: broker down"),
            ]
        )

    def _inbox(self, now):
        InboxMessage.objects.bulk_create(
            [
                InboxMessage(
                    subscriber="shop.reserve_stock",
                    message_id=str(uuid.uuid4()),
                    received_at=now - timedelta(minutes=m),
                    duplicates=d,
                )
                for m, d in ((5, 0), (15, 2), (60 * 24 * 31, 0))
            ]
        )

    def _webhooks(self, now):
        def receipt(delivery_id, state, age, **extra):
            at = now - age
            done = state in ("processed", "skipped")
            return WebhookReceipt(
                source="github",
                delivery_id=delivery_id,
                event_type="ping",
                body=b'{"zen": "Design for failure."}',
                headers={"Content-Type": "application/json"},
                state=state,
                received_at=at,
                processed_at=at if done else None,
                **extra,
            )

        WebhookReceipt.objects.bulk_create(
            [
                receipt("seed-received", "received", timedelta(seconds=30)),
                receipt("seed-processed", "processed", timedelta(hours=3), attempts=1),
                receipt("seed-skipped", "skipped", timedelta(hours=4), attempts=1),
                receipt(
                    "seed-failed",
                    "failed",
                    timedelta(hours=1),
                    attempts=2,
                    last_error="Traceback (most recent call last):\n  ...\n"
                    "KeyError: 'order'",
                ),
                receipt("seed-old", "processed", timedelta(days=40), attempts=1),
            ]
        )
        for reason in ("bad-signature", "bad-signature", "bad-timestamp"):
            WebhookRejection.objects.count_one(source="stripe", reason=reason, now=now)
