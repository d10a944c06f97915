"""Queries on outbox messages, named by intent."""

from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import models

if TYPE_CHECKING:  # the models import these querysets
    from .models import OutboxMessage  # noqa: F401 (named in QuerySet[...])

# A message made due now (recorded, requeued, hurried) is stamped this much
# earlier: the relay kicked for it compares with its own host's clock, and
# one behind the writer's by up to this much still finds it due, instead of
# leaving it to beat.
CLOCK_SKEW_ALLOWANCE = timedelta(seconds=1)


class OutboxMessageQuerySet(models.QuerySet["OutboxMessage"]):
    def pending(self):
        return self.filter(state=self.model.State.PENDING)

    def published(self):
        return self.filter(state=self.model.State.PUBLISHED)

    def dead(self):
        return self.filter(state=self.model.State.DEAD)

    def due(self, now):
        """Pending messages whose time has come, leased or not."""
        return self.pending().filter(available_at__lte=now)

    def claimable(self, now):
        """Due messages no live relay holds."""
        return self.due(now).filter(
            models.Q(locked_until__isnull=True) | models.Q(locked_until__lte=now)
        )

    def first_unpublished_of_their_aggregate(self):
        """Messages no older unpublished (pending, leased or dead) message of
        their aggregate precedes: the ones an ordered relay may publish."""
        older = self._older_of_their_aggregate().exclude(
            state=self.model.State.PUBLISHED
        )
        return self.filter(~models.Exists(older))

    def held_by_dead(self):
        """Pending messages an older dead message of their aggregate holds:
        in ORDERED mode they wait until it is requeued."""
        older = self._older_of_their_aggregate().filter(state=self.model.State.DEAD)
        return self.pending().filter(models.Exists(older))

    def dead_holding(self, message):
        """The oldest dead message of ``message``'s aggregate older than it."""
        return (
            self.dead()
            .filter(
                models.Q(created_at__lt=message.created_at)
                | models.Q(created_at=message.created_at, id__lt=message.id),
                aggregatetype=message.aggregatetype,
                aggregateid=message.aggregateid,
            )
            .order_by("created_at", "id")
            .first()
        )

    def _older_of_their_aggregate(self):
        """A subquery: the messages of the outer row's aggregate before it."""
        return self.model._default_manager.filter(
            models.Q(created_at__lt=models.OuterRef("created_at"))
            | models.Q(
                created_at=models.OuterRef("created_at"),
                id__lt=models.OuterRef("id"),
            ),
            aggregatetype=models.OuterRef("aggregatetype"),
            aggregateid=models.OuterRef("aggregateid"),
        )

    def purgeable(self, now, retention):
        """Published rows older than the retention; never an unpublished one."""
        return self.published().filter(published_at__lt=now - retention)

    def oldest_pending_age(self, now):
        """Lag of the backlog, counted from when its oldest message became due.

        Messages are due when recorded, so the age is ``now - created_at``:
        ``available_at`` moves with the backoff and would hide the lag.
        """
        oldest = self.pending().aggregate(oldest=models.Min("created_at"))["oldest"]
        # Never below 0: the writer's clock (or ORDERED mode's stamp just
        # after the aggregate's last event) may run ahead of this host's.
        return max(now - oldest, timedelta(0)) if oldest else None

    def requeue(self, now):
        """Give dead messages a fresh attempt budget, due now; ``attempts``
        keeps growing so every write-back stays fenced."""
        return self.dead().update(
            state=self.model.State.PENDING,
            available_at=now - CLOCK_SKEW_ALLOWANCE,
            locked_until=None,
            requeued_at_attempt=models.F("attempts"),
        )
