"""The idempotency records in the operations console."""

from django.contrib import admin
from django.shortcuts import redirect
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .console.admin import (
    AgeFilter,
    InputFilter,
    ReadOnlyAdmin,
    log_action,
    pretty_body,
    pretty_json,
)
from .models import IdempotencyRecord, OpsDashboard
from .shared import clock

State = IdempotencyRecord.State
STATE_COLOURS: dict[str, str] = {
    State.PENDING: "#b7791f",
    State.COMPLETED: "#2f855a",
    State.FAILED: "#c53030",
}


class StuckFilter(admin.SimpleListFilter):
    title = _("lease")
    parameter_name = "lease"

    def lookups(self, request, model_admin):
        return (("stuck", _("stuck (lease expired)")), ("live", _("held")))

    def queryset(self, request, queryset):
        now = clock.now()
        if self.value() == "stuck":
            return queryset.stuck(now)
        if self.value() == "live":
            return queryset.filter(state=State.PENDING, locked_until__gte=now)
        return queryset


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    state_colours = STATE_COLOURS
    list_display = [
        "key",
        "state_badge",
        "operation",
        "scope",
        "status_code",
        "attempts",
        "created_at",
        "expires_at",
    ]
    list_filter = [
        "state",
        StuckFilter,
        InputFilter.on("operation", _("operation")),
        InputFilter.on("scope", _("scope")),
        AgeFilter,
    ]
    # Key only, one indexed equality: an OR over columns misleads the planner
    # into walking the whole created_at index. Scopes have their own filter.
    search_fields = ["key__exact"]
    search_help_text = _("Exact key (use the scope filter for a scope).")
    date_hierarchy = "created_at"
    ordering = ["-created_at"]
    actions = ["release_stuck_keys"]
    fields = readonly_fields = (
        "scope",
        "operation",
        "key",
        "state",
        "attempts",
        "request_hash",
        "status_code",
        "pretty_headers",
        "pretty_response",
        "resource_type",
        "resource_id",
        "locked_until",
        "created_at",
        "completed_at",
        "expires_at",
    )

    @admin.display(description=_("response headers"))
    def pretty_headers(self, obj):
        return pretty_json(obj.response_headers)

    @admin.display(description=_("response body"))
    def pretty_response(self, obj):
        return pretty_body(obj.response_body)

    def has_release_permission(self, request):
        return self.has_named_permission(request, "release_idempotencyrecord")

    @admin.action(permissions=["release"], description=_("Release stuck keys"))
    def release_stuck_keys(self, request, queryset):
        # Only an expired lease is released: a live one belongs to a running
        # worker. "failed" lets the client's retry run; the fenced completion
        # of a late worker then matches nothing.
        now = clock.now()
        stuck = list(queryset.stuck(now))
        released = (
            IdempotencyRecord.objects.filter(pk__in=[record.pk for record in stuck])
            .stuck(now)
            .update(state=State.FAILED, locked_until=None)
        )
        log_action(request, stuck, "Released stuck key (lease expired).")
        skipped = queryset.count() - released
        self.report(
            request,
            released,
            skipped,
            ngettext(
                "Released %(count)d stuck key.",
                "Released %(count)d stuck keys.",
                released,
            ),
            ngettext(
                "%(count)d was not stuck and was left alone.",
                "%(count)d were not stuck and were left alone.",
                skipped,
            ),
        )


@admin.register(OpsDashboard)
class OpsDashboardAdmin(ReadOnlyAdmin):
    """The admin index entry for /admin/ops/."""

    def changelist_view(self, request, extra_context=None):
        return redirect("once_ops:dashboard")
