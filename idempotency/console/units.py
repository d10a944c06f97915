"""Units of work in the console: their step logs, the stuck ones, and the
two ways an operator resolves one: release (the next retry resumes) and
abandon (compensate the completed steps)."""

import json

from django.contrib import admin, messages
from django.db import connections, transaction
from django.db.models import F, Q
from django.utils.translation import gettext as _g
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from ..shared import clock, signals, units
from ..shared.steps import CompensationFailed, StepError, compensate
from ..shared.steps.handle import report
from ..shared.steps.models import StepRecord, UnitRecord
from . import admin as console
from .panels import UNFINISHED, Panel, in_state, stuck, stuck_leases

UnitState = UnitRecord.State
StepState = StepRecord.State
# How much of a step's result its row shows.
SHORT_RESULT = 80


def _stuck(queryset):
    return stuck(queryset, clock.now())


def _released(queryset):
    return queryset.filter(state=UnitState.RUNNING, lease_expires_at=None)


def short_json(value) -> str:
    if value is None:
        return "—"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= SHORT_RESULT else text[: SHORT_RESULT - 1] + "…"


class StepInline(admin.TabularInline):
    model = StepRecord
    extra = 0
    can_delete = False
    ordering = ["created_at", "id"]
    fields = readonly_fields = (
        "name",
        "state",
        "attempts",
        "attempt",
        "created_at",
        "finished_at",
        "short_result",
        "error",
        "undo",
    )

    @admin.display(description=_("result"))
    def short_result(self, obj):
        return short_json(obj.result)

    def has_view_permission(self, request, obj=None):
        # The steps are the unit's own log: whoever may see it sees them.
        return request.user.has_perm("idempotency.view_unitrecord")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(UnitRecord)
class UnitAdmin(console.ReadOnlyAdmin):
    state_colours = {
        UnitState.RUNNING: console.Badge.WAITING,
        UnitState.DONE: console.Badge.DONE,
        UnitState.COMPENSATING: console.Badge.FAILED,
        UnitState.COMPENSATED: console.Badge.SKIPPED,
    }
    list_display = [
        "label",
        "kind",
        "state_badge",
        "attempt",
        "lease_expires_at",
        "created_at",
        "updated_at",
    ]
    list_filter = [
        "state",
        console.ChoiceFilter.on(
            "kind",
            _("kind"),
            **{
                kind: (kind, lambda rows, kind=kind: rows.filter(kind=kind))
                for kind in (units.KEYS, units.INBOX, units.WEBHOOKS)
            },
        ),
        console.ChoiceFilter.on(
            "lease",
            _("lease"),
            stuck=(_("stuck mid-steps (lease expired)"), _stuck),
            released=(_("released, awaiting a retry"), _released),
        ),
        console.AgeFilter,
        console.PastRetentionFilter,
    ]
    # One indexed equality: the unit's identity (the primary key).
    search_fields = ["id__exact"]
    search_help_text = _("Exact unit identity (64 hex digits).")
    date_hierarchy = "created_at"
    actions = ["release_units", "abandon_units"]
    version_field = "attempt"  # a retry that resumes it, a release, raise it
    inlines = [StepInline]
    fields = (
        "label",
        "kind",
        "id",
        "intent",
        "state",
        "attempt",
        "lease_expires_at",
        "reason",
        "error",
        "created_at",
        "updated_at",
    )
    has_release_permission = console.action_permission("release")
    has_abandon_permission = console.action_permission("abandon")

    @admin.action(
        permissions=["release"], description=_("Release stuck units (retry resumes)")
    )
    def release_units(self, request, queryset):
        # Only a lapsed lease: a live one belongs to a working worker. The
        # attempt goes up, so a hung worker that wakes stores nothing more.
        selected = queryset.count()
        queryset = console.for_writing(queryset)
        unchanged = self.fence(request, queryset)
        with transaction.atomic(using=queryset.db):
            now = clock.now()
            chosen = console.lock_unchanged(
                queryset,
                Q(state=UnitState.RUNNING, lease_expires_at__lt=now),
                unchanged,
            )
            UnitRecord.objects.using(queryset.db).filter(
                pk__in=[unit.pk for unit in chosen]
            ).update(attempt=F("attempt") + 1, lease_expires_at=None, updated_at=now)
            console.log_action(
                request, chosen, "Released stuck unit (the next retry resumes)."
            )
            if chosen:
                report.operator_action(
                    signals.units_released,
                    request.user,
                    chosen,
                    "released %(count)s stuck unit(s)",
                    using=queryset.db,
                    units=[{"kind": unit.kind, "unit": unit.pk} for unit in chosen],
                )
        done = len(chosen)
        self.report(
            request,
            selected,
            done,
            ngettext_lazy(
                "Released %(count)d unit.", "Released %(count)d units.", "count"
            ),
            ngettext_lazy(
                "%(count)d was not stuck and was left alone.",
                "%(count)d were not stuck and were left alone.",
                "count",
            ),
        )

    @admin.action(
        permissions=["abandon"],
        description=_("Abandon selected units (compensate their steps)"),
    )
    def abandon_units(self, request, queryset):
        queryset = console.for_writing(queryset)
        if connections[queryset.db].in_atomic_block:
            self.message_user(
                request,
                _g(
                    "Compensations call out, so not inside a transaction: "
                    "turn ATOMIC_REQUESTS off for the admin."
                ),
                messages.ERROR,
            )
            return
        selected = queryset.count()
        # A unit released (or resumed) since the page was shown has moved on:
        # abandoning it would undo the steps its retry is about to resume.
        unchanged = self.fence(request, queryset)
        abandoned, refused = [], []
        # The client's retry gets the reason as its answer's detail: no staff
        # name in it (the admin log keeps who it was).
        reason = _g("Abandoned by an operator in the console.")
        for unit in queryset.filter(unchanged, state__in=UNFINISHED):
            try:
                # The attempt just read, checked again under the unit's lock.
                if compensate(unit.pk, reason, using=queryset.db, seen=unit.attempt):
                    abandoned.append(unit)
            except CompensationFailed as exc:
                # Undos before the failing one ran on this click: logged, with
                # the operator, like a compensation that finished.
                console.log_action(
                    request, [unit], f"Abandoned unit; its compensation stopped: {exc}"
                )
                refused.append(f"{unit.label}: {exc.detail}")
            except StepError as exc:
                refused.append(f"{unit.label}: {exc.detail}")
        console.log_action(request, abandoned, "Abandoned unit (compensated).")
        done = len(abandoned)
        self.report(
            request,
            selected,
            done,
            ngettext_lazy(
                "Abandoned and compensated %(count)d unit.",
                "Abandoned and compensated %(count)d units.",
                "count",
            ),
            ngettext_lazy(
                "%(count)d was finished, compensated or busy and was left alone.",
                "%(count)d were finished, compensated or busy and were left alone.",
                "count",
            ),
        )
        for text in refused:
            self.message_user(request, text, messages.WARNING)


def panel(now) -> Panel:
    rows = UnitRecord.objects
    return Panel(
        _g("Units of work (steps)"),
        [
            in_state(UnitRecord, _g("running"), UnitState.RUNNING),
            stuck_leases(
                UnitRecord, _g("stuck mid-steps (lease expired)"), stuck(rows, now)
            ),
            in_state(
                UnitRecord, _g("compensating"), UnitState.COMPENSATING, alert=True
            ),
        ],
    )
