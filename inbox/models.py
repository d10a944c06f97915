"""The inbox: one row per (subscriber, message id) a consumer has applied."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from idempotency.shared import fields

from .querysets import InboxMessageManager


class InboxMessage(models.Model):
    class State(models.TextChoices):
        # Committed with the consumer's work: a redelivery is a duplicate.
        APPLIED = "applied", _("applied")
        # Every attempt raised: nothing applied; a redelivery or a replay runs.
        DEAD = "dead", _("dead")
        # A steps consumer's claim, committed before its steps ran: a
        # redelivery resumes at the first unfinished step.
        RUNNING = "running", _("running")

    subscriber = models.CharField(
        _("subscriber"),
        max_length=255,
        help_text=_("The consumer; ids are deduplicated per subscriber."),
    )
    message_id = models.CharField(_("message id"), max_length=255)
    received_at = models.DateTimeField(_("received at"))
    duplicates = models.PositiveIntegerField(
        _("duplicates"), default=0, help_text=_("Redeliveries dropped so far.")
    )
    state = fields.state(State, default=State.APPLIED)
    attempts = models.PositiveIntegerField(
        _("attempts"),
        # db_default: the claim's INSERT names only the columns it decides.
        db_default=0,
        help_text=_("Runs of the consumer task that raised, when it went dead."),
    )
    last_error = models.TextField(_("last error"), blank=True, db_default="")
    locked_until = fields.lease_end(
        help_text=_(
            "A running steps consumer's lease: a redelivery waits for it to "
            "lapse, then resumes at the first unfinished step."
        ),
    )
    redrive = models.JSONField(
        _("redrive"),
        null=True,
        blank=True,
        help_text=_("The Celery task a replay sends again: name, id, arguments."),
    )

    objects = InboxMessageManager()

    class Meta:
        db_table = "inbox_message"
        verbose_name = _("inbox message")
        verbose_name_plural = _("inbox messages")
        constraints = [
            # message_id first: the same index serves the console's search by
            # message id; uniqueness (and ON CONFLICT) ignore column order.
            models.UniqueConstraint(
                fields=["message_id", "subscriber"], name="inbox_unique_message"
            ),
        ]
        indexes = [
            models.Index(fields=["received_at"], name="inbox_received_idx"),
            models.Index(
                fields=["duplicates"],
                condition=models.Q(duplicates__gt=0),
                name="inbox_duplicates_idx",
            ),
            # The console's dead figure and filter read only these rows.
            models.Index(
                fields=["state"],
                condition=models.Q(state="dead"),
                name="inbox_dead_idx",
            ),
            # The console's figure of deliveries mid-steps reads only these.
            models.Index(
                fields=["received_at"],
                condition=models.Q(state="running"),
                name="inbox_running_idx",
            ),
        ]
        permissions = [("replay_inboxmessage", "Can replay dead inbox messages")]

    def __str__(self):
        return f"{self.subscriber} {self.message_id}"
