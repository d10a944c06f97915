"""The idempotency record: one row per (scope, operation, key)."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from .querysets import IdempotencyRecordQuerySet
from .shared import fields

# The step log of every app's units lives in the shared core; importing it
# here registers its models with this app.
from .shared.steps.models import StepRecord, UnitRecord  # noqa: F401


class IdempotencyRecord(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", _("pending")
        COMPLETED = "completed", _("completed")
        FAILED = "failed", _("failed")

    scope = models.CharField(
        _("scope"), max_length=255, help_text=_("Tenant or principal owning the key.")
    )
    operation = models.CharField(_("operation"), max_length=255)
    key = models.CharField(_("key"), max_length=255)
    request_hash = models.CharField(
        _("request hash"), max_length=64, help_text=_("SHA-256 of the fingerprint.")
    )
    state = fields.state(State, default=State.PENDING)
    status_code = models.PositiveSmallIntegerField(_("status code"), null=True)
    response_body = models.BinaryField(
        _("response body"),
        null=True,
        help_text=_("NULL on a completed record: the answer was not kept."),
    )
    response_headers = models.JSONField(_("response headers"), default=dict)
    session_digest = models.CharField(
        _("session digest"),
        max_length=64,
        blank=True,
        # In the database too: rows inserted by raw SQL or by code from before
        # this field (a rolling deploy) are bound to no session.
        default="",
        db_default="",
        help_text=_("SHA-256 of the one session cookie it replays to."),
    )
    resource_type = models.CharField(_("resource type"), max_length=100, blank=True)
    resource_id = models.CharField(_("resource id"), max_length=255, blank=True)
    attempts = models.PositiveIntegerField(
        _("attempts"), default=1, help_text=_("Claims so far; fences lease writes.")
    )
    locked_until = fields.lease_end()
    created_at = models.DateTimeField(_("created at"))
    completed_at = models.DateTimeField(_("completed at"), null=True, blank=True)
    expires_at = models.DateTimeField(_("expires at"))

    objects = IdempotencyRecordQuerySet.as_manager()

    class Meta:
        verbose_name = _("idempotency record")
        verbose_name_plural = _("idempotency records")
        permissions = [
            ("release_idempotencyrecord", _("Can release stuck idempotency keys")),
            ("purge_records", _("Can purge expired records of every kind")),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "operation", "key"], name="idempotency_unique_key"
            ),
        ]
        indexes = [
            models.Index(fields=["expires_at"], name="idempotency_expires_idx"),
            models.Index(
                fields=["state", "locked_until"], name="idempotency_state_idx"
            ),
            models.Index(fields=["key"], name="idempotency_key_idx"),
            # The console's time series and its operation filter, newest first.
            # created_at leads: an index led by operation was the planner's
            # pick for a key's read whenever its statistics had not seen the
            # operation yet (a new one, autovacuum behind), and every read then
            # walked all of that operation's rows.
            models.Index(
                fields=["created_at", "operation"], name="idempotency_created_op_idx"
            ),
        ]

    def __str__(self):
        return f"{self.operation} {self.key} ({self.state})"


class OpsDashboard(IdempotencyRecord):
    """Not data: gives the operations dashboard a place on the admin index
    and a permission of its own (``idempotency.view_opsdashboard``)."""

    class Meta:
        proxy = True
        verbose_name = _("operations dashboard")
        verbose_name_plural = _("operations dashboard")
        default_permissions = ("view",)
