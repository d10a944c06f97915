"""Webhook receipts (one per source and delivery id) and rejection counts."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from idempotency.shared import fields

from .querysets import WebhookReceiptQuerySet, WebhookRejectionQuerySet


class ReceiptState(models.TextChoices):
    RECEIVED = "received", _("received")
    PROCESSED = "processed", _("processed")
    FAILED = "failed", _("failed")
    SKIPPED = "skipped", _("skipped")


# No worker runs these again unless an operator forces it; only these are
# ever purged. (Module level: the model's Meta cannot see its class body.)
FINISHED = [ReceiptState.PROCESSED, ReceiptState.SKIPPED]


class WebhookReceipt(models.Model):
    State = ReceiptState
    FINISHED = tuple(FINISHED)
    # What a replay may enqueue again.
    REPLAYABLE = (State.RECEIVED, State.FAILED)

    source = models.CharField(
        _("source"), max_length=64, help_text=_("Key in WEBHOOKS['SOURCES'].")
    )
    delivery_id = models.CharField(
        _("delivery id"),
        max_length=255,
        help_text=_("The provider's event id, the same on every retry."),
    )
    event_type = models.CharField(_("event type"), max_length=255, blank=True)
    occurred_at = models.DateTimeField(
        _("occurred at"),
        null=True,
        blank=True,
        help_text=_("When the event happened, if the provider says."),
    )
    headers = models.JSONField(
        _("headers"),
        default=dict,
        help_text=_("Allow-listed headers; never cookies or signatures."),
    )
    body = models.BinaryField(_("body"), help_text=_("The raw verified body."))
    body_sha256 = models.CharField(
        _("body SHA-256"),
        max_length=64,
        blank=True,
        help_text=_("Hex; set only where the delivery id is unsigned."),
    )
    state = fields.state(State, default=State.RECEIVED)
    attempts = models.PositiveIntegerField(
        _("attempts"), default=0, help_text=_("Processing runs so far.")
    )
    last_error = models.TextField(_("last error"), blank=True)
    locked_until = fields.lease_end(
        help_text=_(
            "Set before a worker runs the receipt's handlers, cleared when "
            "the run ends: still set once it has passed, that worker died. "
            "Steps handlers resume at the first unfinished step."
        ),
    )
    worker_deaths = models.PositiveIntegerField(
        _("worker deaths"),
        default=0,
        help_text=_(
            "Runs whose worker died before the run ended, since the last "
            "redelivery or replay; with the runs that raised, they use up "
            "MAX_RETRIES."
        ),
    )
    received_at = models.DateTimeField(_("received at"))
    processed_at = models.DateTimeField(_("processed at"), null=True, blank=True)

    objects = WebhookReceiptQuerySet.as_manager()

    class Meta:
        verbose_name = _("webhook receipt")
        verbose_name_plural = _("webhook receipts")
        permissions = [
            ("replay_webhookreceipt", _("Can replay received or failed receipts")),
            ("reprocess_webhookreceipt", _("Can force reprocessing of receipts")),
        ]
        constraints = [
            # delivery_id first: the same index serves the console's search by
            # delivery id; uniqueness (and ON CONFLICT) ignore column order.
            models.UniqueConstraint(
                fields=["delivery_id", "source"], name="webhooks_unique_delivery"
            ),
            # Partial: only sources with unsigned delivery ids set a hash, and
            # only their receipts need the index.
            models.UniqueConstraint(
                fields=["source", "body_sha256"],
                condition=~models.Q(body_sha256=""),
                name="webhooks_unique_body",
            ),
        ]
        # The console filters by state or source and lists newest first; each
        # index serves one of those lists without a sort over all rows. None
        # is led by source: the planner took such an index for a delivery's
        # lookup whenever its statistics had not seen the source yet (one
        # added since the last ANALYZE), and walked all of its receipts.
        indexes = [
            models.Index(
                fields=["received_at", "source"], name="webhooks_received_src_idx"
            ),
            models.Index(
                fields=["state", "received_at"], name="webhooks_state_received_idx"
            ),
            # A drain's take of one source's oldest received receipt, and the
            # dashboard's capped counts per source and state, index-only.
            models.Index(
                fields=["state", "source", "received_at"],
                name="webhooks_state_source_idx",
            ),
            # Retention: finished receipts by age, the only ones ever purged.
            models.Index(
                fields=["processed_at"],
                condition=models.Q(state__in=FINISHED),
                name="webhooks_done_idx",
            ),
        ]

    def __str__(self):
        return f"{self.source} {self.delivery_id} ({self.state})"


class WebhookRejection(models.Model):
    """How many requests one source refused for one reason on one day.

    Bounded: sources are configured and reasons a closed set, so an attacker
    can grow a count but never the number of rows per day; no bodies are kept.
    """

    source = models.CharField(_("source"), max_length=64)
    reason = models.CharField(_("reason"), max_length=32)
    day = models.DateField(_("day"))
    count = models.PositiveBigIntegerField(_("count"), default=0)
    last_seen_at = models.DateTimeField(_("last seen at"))

    objects = WebhookRejectionQuerySet.as_manager()

    class Meta:
        verbose_name = _("webhook rejection")
        verbose_name_plural = _("webhook rejections")
        constraints = [
            models.UniqueConstraint(
                fields=["source", "reason", "day"], name="webhooks_unique_rejection"
            ),
        ]
        indexes = [models.Index(fields=["day"], name="webhooks_rejection_day_idx")]

    def __str__(self):
        return f"{self.source} {self.reason} on {self.day}: {self.count}"
