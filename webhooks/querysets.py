"""Queries on receipts and rejection counts, named by intent."""

from django.db import connections, models

from idempotency.shared.settings import as_timedelta

from .conf import webhooks_settings

RECEIVED, FAILED = "received", "failed"
DONE = ("processed", "skipped")


class WebhookReceiptQuerySet(models.QuerySet):
    def duplicate_of(self, source, delivery_id, body_sha256):
        """The receipt an insert conflicted with: this delivery id's, else this
        body's (two can match; the delivery id names the one resent)."""
        same = models.Q(delivery_id=delivery_id)
        if body_sha256:
            same |= models.Q(body_sha256=body_sha256)
        resent = models.Case(models.When(delivery_id=delivery_id, then=0), default=1)
        return (
            self.filter(same, source=source)
            .order_by(resent)
            .only("pk", "state", "delivery_id")
            .first()
        )

    def claimable(self, pk):
        """The receipt, locked, unless another worker holds it (then empty)."""
        return self.select_for_update(skip_locked=True).filter(pk=pk)

    def purgeable(self, now):
        """Processed or skipped receipts older than the retention; never others."""
        cutoff = now - as_timedelta(webhooks_settings.RETENTION)
        return self.filter(state__in=DONE, processed_at__lt=cutoff)

    def waiting(self, before):
        """Received receipts no worker finished: their enqueue may have been lost."""
        return self.filter(state=RECEIVED, received_at__lt=before)

    def insert_received(self, *, source, delivery, headers, body, body_sha256, now):
        """Insert a received receipt unless it exists; return its id or None.

        It exists when the source has a receipt with this delivery id or,
        unless ``body_sha256`` is empty, with this body. ``ON CONFLICT DO
        NOTHING`` with no target covers both unique indexes: a concurrent
        insert of the same delivery or body waits on the index until the
        first commits, then inserts nothing, so exactly one request owns the
        new receipt.
        """
        connection = connections[self.db]
        fields = {f.name: f for f in self.model._meta.concrete_fields}
        values = {
            "source": source,
            "delivery_id": delivery.delivery_id,
            "event_type": delivery.event_type,
            "occurred_at": delivery.occurred_at,
            "headers": headers,
            "body": body,
            "body_sha256": body_sha256,
            "state": RECEIVED,
            "attempts": 0,
            "last_error": "",
            "received_at": now,
        }
        columns = ", ".join(fields[name].column for name in values)
        params = [
            fields[name].get_db_prep_save(value, connection)
            for name, value in values.items()
        ]
        table = connection.ops.quote_name(self.model._meta.db_table)
        sql = (
            f"INSERT INTO {table} ({columns}) "
            f"VALUES ({', '.join(['%s'] * len(params))}) "
            "ON CONFLICT DO NOTHING RETURNING id"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return row[0] if row else None

    def reopen_failed(self, pk) -> bool:
        """Turn a failed receipt back to received; True if this call did it.

        Conditional UPDATE: of two redeliveries racing, one reopens it and
        enqueues, the other sees it received and answers a plain duplicate.
        """
        return bool(self.filter(pk=pk, state=FAILED).update(state=RECEIVED))

    def record_failure(self, pk, error):
        """Mark failed after the processing transaction rolled back."""
        return (
            self.filter(pk=pk)
            .exclude(state__in=DONE)
            .update(
                state=FAILED,
                attempts=models.F("attempts") + 1,
                last_error=error,
            )
        )


class WebhookRejectionQuerySet(models.QuerySet):
    def purgeable(self, now):
        cutoff = now - as_timedelta(webhooks_settings.RETENTION)
        return self.filter(day__lt=cutoff.date())

    def count_one(self, *, source, reason, now):
        """Add one to today's (source, reason) count in one statement."""
        connection = connections[self.db]
        table = connection.ops.quote_name(self.model._meta.db_table)
        fields = {f.name: f for f in self.model._meta.concrete_fields}
        params = [
            source,
            reason,
            fields["day"].get_db_prep_save(now.date(), connection),
            fields["last_seen_at"].get_db_prep_save(now, connection),
        ]
        sql = (
            f"INSERT INTO {table} (source, reason, day, count, last_seen_at) "
            "VALUES (%s, %s, %s, 1, %s) "
            "ON CONFLICT (source, reason, day) DO UPDATE SET "
            f"count = {table}.count + 1, last_seen_at = excluded.last_seen_at"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
