"""The outbox table, with Debezium's outbox event router column names."""

import uuid

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils.translation import gettext_lazy as _

from idempotency.shared import fields

from .querysets import OutboxMessageQuerySet


class MessageState(models.TextChoices):
    PENDING = "pending", _("pending")
    PUBLISHED = "published", _("published")
    DEAD = "dead", _("dead")


class OutboxMessage(models.Model):
    State = MessageState

    # id, aggregatetype, aggregateid, type and payload are Debezium's default
    # names, so a team can switch to CDC without a migration.
    id = models.UUIDField(
        _("id"),
        primary_key=True,
        default=uuid.uuid4,
        editable=False,
        help_text=_("The message id every delivery carries."),
    )
    aggregatetype = models.CharField(
        _("aggregate type"), max_length=255, help_text=_("Routes the message.")
    )
    aggregateid = models.CharField(_("aggregate id"), max_length=255)
    type = models.CharField(_("event type"), max_length=255)
    payload = models.JSONField(_("payload"), encoder=DjangoJSONEncoder)
    headers = models.JSONField(
        _("headers"),
        default=dict,
        encoder=DjangoJSONEncoder,
        help_text=_("Message id, idempotency key, traceparent, ..."),
    )
    # Debezium's outbox event router reads the trace context from this column
    # (its default tracing.span.context.field), a java.util.Properties text;
    # record() writes it in Debezium mode only; empty means none.
    tracingspancontext = models.TextField(
        _("tracing span context"), blank=True, default="", editable=False
    )
    state = fields.state(State, default=State.PENDING)
    created_at = models.DateTimeField(
        _("created at"), help_text=_("When it was recorded: lag counts from here.")
    )
    available_at = models.DateTimeField(
        _("available at"), help_text=_("Not claimed before; backoff pushes it on.")
    )
    published_at = models.DateTimeField(_("published at"), null=True, blank=True)
    attempts = models.PositiveIntegerField(
        _("attempts"), default=0, help_text=_("Claims so far; fences relay writes.")
    )
    requeued_at_attempt = models.PositiveIntegerField(
        _("requeued at attempt"),
        default=0,
        help_text=_("Attempts before the last requeue."),
    )
    locked_until = fields.lease_end(help_text=_("End of the current relay's lease."))
    last_error = models.TextField(_("last error"), blank=True)

    objects = OutboxMessageQuerySet.as_manager()

    class Meta:
        db_table = "outbox_message"
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox messages")
        permissions = [
            ("requeue_outboxmessage", _("Can requeue dead or failing messages")),
        ]
        indexes = [
            # The relay's claim: pending rows in due order.
            models.Index(
                fields=["available_at"],
                condition=models.Q(state=MessageState.PENDING),
                name="outbox_due_idx",
            ),
            # Ordered mode: "is an older message of this aggregate unpublished?"
            models.Index(
                fields=["aggregatetype", "aggregateid", "created_at"],
                condition=~models.Q(state=MessageState.PUBLISHED),
                name="outbox_unpublished_idx",
            ),
            # The console: filter by state, newest first; search by aggregate.
            models.Index(fields=["state", "created_at"], name="outbox_state_idx"),
            models.Index(fields=["aggregateid"], name="outbox_aggregate_idx"),
            models.Index(fields=["created_at"], name="outbox_created_idx"),
            # Retention: published rows past their age.
            models.Index(
                fields=["published_at"],
                condition=models.Q(state=MessageState.PUBLISHED),
                name="outbox_published_idx",
            ),
        ]

    def __str__(self):
        return f"{self.type} {self.aggregatetype}:{self.aggregateid} ({self.state})"
