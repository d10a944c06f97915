"""Queries on receipts and rejection counts, named by intent."""

from typing import TYPE_CHECKING

from django.db import connections, models

from idempotency.shared.inserts import insert_or_update, insert_shape

from .sources import checked_retention
from .verifiers.base import stored_event_time

if TYPE_CHECKING:  # the models import these querysets
    from .models import WebhookReceipt, WebhookRejection  # noqa: F401 (named in QuerySet[...])


class WebhookReceiptQuerySet(models.QuerySet["WebhookReceipt"]):
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

    # These two lock and return ids only: a row whose values cannot be read
    # is still taken, and marked failed, instead of failing every drain.

    def lock_for_processing(self, pk):
        """The receipt's id, row-locked for this worker; empty when another
        holds it (or it is gone)."""
        return (
            self.select_for_update(skip_locked=True)
            .filter(pk=pk)
            .values_list("pk", flat=True)
        )

    def next_received(self, now):
        """The ids of the received receipts no other worker holds, oldest
        first, row-locked (nor runs, under a live lease): take ``first()``."""
        return (
            self.select_for_update(skip_locked=True)
            .filter(state=self.model.State.RECEIVED)
            .exclude(locked_until__gt=now)
            .order_by("received_at", "pk")
            .values_list("pk", flat=True)
        )

    def lock_leased(self, pk, lease):
        """The receipt's id, row-locked, while ``lease`` is still its lease;
        empty once another worker took it over. Waits: only a moment's
        transaction (another worker finding the lease live) may hold it."""
        return (
            self.select_for_update()
            .filter(pk=pk, locked_until=lease)
            .values_list("pk", flat=True)
        )

    def purgeable(self, now):
        """Processed or skipped receipts older than the retention; never others.

        Raises ImproperlyConfigured while a source refuses RETENTION.
        """
        cutoff = now - checked_retention()
        return self.filter(state__in=self.model.FINISHED, processed_at__lt=cutoff)

    def waiting(self, before, now):
        """Received receipts no worker finished nor holds under a live lease
        (a steps handler's run): their enqueue may have been lost."""
        return self.filter(
            state=self.model.State.RECEIVED, received_at__lt=before
        ).exclude(locked_until__gt=now)

    def insert_received(self, *, source, delivery, headers, body, body_sha256, now):
        """Insert a received receipt unless it exists; return its id or None.

        It exists when the source has a receipt with this delivery id or,
        unless ``body_sha256`` is empty, with this body. ``ON CONFLICT DO
        NOTHING`` with no target covers both unique indexes: a concurrent
        insert of the same delivery or body waits on the index until the
        first commits, then inserts nothing, so exactly one request owns the
        new receipt.
        """
        row = {
            "source": source,
            "delivery_id": delivery.delivery_id,
            "event_type": delivery.event_type,
            "occurred_at": stored_event_time(delivery.occurred_at),
            "headers": headers,
            "body": body,
            "body_sha256": body_sha256,
            "state": self.model.State.RECEIVED,
            "received_at": now,
        }
        connection = connections[self.db]
        insert = insert_shape(self.model, connection)
        with connection.cursor() as cursor:
            cursor.execute(
                f"{insert.sql} ON CONFLICT DO NOTHING RETURNING {insert.pk_column}",
                insert.params(row, connection),
            )
            found = cursor.fetchone()
        return found[0] if found else None

    def reopen_failed(self, pk) -> bool:
        """Turn a failed receipt back to received; True if this call did it.

        Conditional UPDATE: of two redeliveries racing, one reopens it and
        enqueues, the other sees it received and answers a plain duplicate.
        """
        State = self.model.State
        # Its runs start again: the redelivery's task counts no retry yet.
        reopened = self.filter(pk=pk, state=State.FAILED)
        return bool(reopened.update(state=State.RECEIVED, worker_deaths=0))

    def record_failure(self, pk, error, *, lease=None, taken_from=None, deaths=0):
        """Mark failed after the processing transaction rolled back; return
        1, or 0 when it was finished or (``lease``: the lease the failed
        worker held) a newer worker has taken it over since. ``deaths``: the
        runs whose workers died, when they failed it: each was an attempt.
        A run that raised keeps the deaths before it: they count against
        its retries (``MAX_RETRIES``).

        ``taken_from``: the state the failed run took it in. A redelivery
        may have reopened a failed receipt while the run held its lock: it is
        received again, for the drain that redelivery kicked, and stays so.
        """
        unfinished = self.filter(pk=pk).exclude(state__in=self.model.FINISHED)
        if taken_from is not None:
            unfinished = unfinished.filter(state=taken_from)
        if lease is not None:
            # Fenced on the lease: a newer worker runs the steps now, and its
            # receipt is neither failed nor freed by the one it replaced.
            unfinished = unfinished.filter(locked_until=lease)
        ended = {"worker_deaths": 0} if deaths else {}
        return unfinished.update(
            state=self.model.State.FAILED,
            attempts=models.F("attempts") + (deaths or 1),
            last_error=error,
            # A run that failed lets its lease go: the retry takes it at once
            # (and resumes its steps), and no death is counted.
            locked_until=None,
            **ended,
        )

    def release(self, pk, lease) -> int:
        """Let ``lease`` go from a run that ended without marking the receipt
        (a redelivery reopened it meanwhile), for the drains; 0 once a newer
        worker has taken it over."""
        return self.filter(pk=pk, locked_until=lease).update(
            locked_until=None, worker_deaths=0
        )


class WebhookRejectionQuerySet(models.QuerySet["WebhookRejection"]):
    def purgeable(self, now):
        cutoff = now - checked_retention()
        return self.filter(day__lt=cutoff.date())

    def count_one(self, *, source, reason, now):
        """Add one to today's (source, reason) count in one statement."""
        table = connections[self.db].ops.quote_name(self.model._meta.db_table)
        insert_or_update(
            self,
            {
                "source": source,
                "reason": reason,
                "day": now.date(),
                "count": 1,
                "last_seen_at": now,
            },
            unique=("source", "reason", "day"),
            update=f"count = {table}.count + 1, last_seen_at = excluded.last_seen_at",
        )
