"""The step log: one row per unit of work that runs steps, one per step.

A unit's row is keyed by ``Unit.identity`` (a digest, never a raw client
key) and its ``attempt`` is the fence: each attempt that joins the unit
bumps it, and a recovery point is stored only by the attempt that holds it.
Compensations are step rows of their own, named ``undo:<step>``.
"""

from django.db import models
from django.utils.translation import gettext_lazy as _

from .. import fields


class UnitRecord(models.Model):
    class State(models.TextChoices):
        RUNNING = "running", _("running")
        DONE = "done", _("done")
        COMPENSATING = "compensating", _("compensating")
        COMPENSATED = "compensated", _("compensated")

    id = models.CharField(
        _("identity"), max_length=64, primary_key=True, help_text=_("Unit.identity.")
    )
    kind = models.CharField(_("kind"), max_length=16)
    label = models.CharField(
        _("label"),
        max_length=255,
        blank=True,
        help_text=_("What it is, for people; never a raw client key."),
    )
    intent = models.CharField(_("intent"), max_length=64)
    state = fields.state(State, default=State.RUNNING)
    attempt = models.PositiveIntegerField(
        _("attempt"),
        default=0,
        help_text=_("Attempts that joined it so far; fences its writes."),
    )
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True)
    reason = models.TextField(_("reason given up"), blank=True)
    error = models.TextField(
        _("error"), blank=True, help_text=_("Why the last compensation stopped.")
    )
    created_at = models.DateTimeField(_("created at"))
    updated_at = models.DateTimeField(_("updated at"))

    class Meta:
        # Named: an app that imports the steps with the idempotency app
        # missing gets its system check error, not a crash at import.
        app_label = "idempotency"
        verbose_name = _("unit of work")
        verbose_name_plural = _("units of work")
        permissions = [
            ("release_unitrecord", _("Can release stuck units of work")),
            ("abandon_unitrecord", _("Can abandon (compensate) units of work")),
        ]
        indexes = [
            # The state alone: every step renews the lease, and an index
            # holding it would make each renewal a new row version in every
            # index (not a HOT update). Stuck units are found among the
            # running and compensating ones, as few as the units in flight.
            models.Index(fields=["state"], name="once_unit_state_only_idx"),
            models.Index(fields=["created_at"], name="once_unit_created_idx"),
        ]

    def __str__(self):
        return f"{self.label or self.kind} ({self.state})"


class StepRecord(models.Model):
    class State(models.TextChoices):
        FAILED = "failed", _("failed")
        DONE = "done", _("done")
        UNDONE = "undone", _("undone")

    unit = models.ForeignKey(
        UnitRecord,
        on_delete=models.CASCADE,
        related_name="steps",
        verbose_name=_("unit"),
    )
    name = models.CharField(_("name"), max_length=200)
    state = fields.state(State)
    attempt = models.PositiveIntegerField(
        _("attempt"), help_text=_("The unit's attempt that stored it.")
    )
    result = models.JSONField(_("result"), null=True)
    undo = models.CharField(
        _("undo"), max_length=255, blank=True, help_text=_("Dotted path of its undo.")
    )
    undo_key = models.CharField(
        _("undo key"),
        max_length=64,
        blank=True,
        help_text=_("The key its undo gets: derive('undo:' + name)."),
    )
    error = models.TextField(_("error"), blank=True)
    attempts = models.PositiveIntegerField(_("calls"), default=1)
    created_at = models.DateTimeField(_("created at"))
    finished_at = models.DateTimeField(_("finished at"), null=True)

    class Meta:
        app_label = "idempotency"
        verbose_name = _("step")
        verbose_name_plural = _("steps")
        constraints = [
            models.UniqueConstraint(
                fields=["unit", "name"], name="once_step_unique_name"
            )
        ]

    def __str__(self):
        return f"{self.name} ({self.state})"
