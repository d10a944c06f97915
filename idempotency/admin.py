"""The idempotency records in the operations console."""

from django.contrib import admin
from django.db import transaction
from django.shortcuts import redirect
from django.urls import path
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from . import signals
from .console import admin as console
from .console import units  # noqa: F401 - registers the units of work's admin
from .models import IdempotencyRecord, OpsDashboard
from .shared import clock

State = IdempotencyRecord.State


def _stuck(records):
    return records.stuck(clock.now())


def _held(records):
    return records.filter(state=State.PENDING, locked_until__gte=clock.now())


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(console.ReadOnlyAdmin):
    state_colours = {
        State.PENDING: console.Badge.WAITING,
        State.COMPLETED: console.Badge.DONE,
        State.FAILED: console.Badge.FAILED,
    }
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
        console.ChoiceFilter.on(
            "lease",
            _("lease"),
            stuck=(_("stuck (lease expired)"), _stuck),
            live=(_("held"), _held),
        ),
        console.InputFilter.on("operation", _("operation")),
        console.InputFilter.on("scope", _("scope")),
        console.AgeFilter,
        console.PastRetentionFilter,
    ]
    # Key only, one indexed equality: an OR over columns misleads the planner
    # into walking the whole created_at index. Scopes have their own filter.
    search_fields = ["key__exact"]
    search_help_text = _("Exact key (use the scope filter for a scope).")
    date_hierarchy = "created_at"
    actions = ["release_stuck_keys"]
    version_field = "attempts"  # a retry's claim takes the key over
    heavy_fields = ("response_body", "response_headers")
    fields = (
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

    pretty_headers = console.json_field("response_headers", _("response headers"))
    pretty_response = console.body_field("response_body", _("response body"))
    has_release_permission = console.action_permission("release")

    @admin.action(permissions=["release"], description=_("Release stuck keys"))
    def release_stuck_keys(self, request, queryset):
        # Only an expired lease is released: a live one belongs to a running
        # worker. "failed" lets the client's retry run; the fenced completion
        # of a late worker then matches nothing. Locked as read: a retry or
        # another submit taking a key meanwhile holds it, and only the keys
        # changed here are logged and reported.
        selected = queryset.count()
        queryset = console.for_writing(queryset)
        unchanged = self.fence(request, queryset)
        with transaction.atomic(using=queryset.db):
            stuck = console.lock_unchanged(queryset.stuck(clock.now()), unchanged)
            IdempotencyRecord.objects.using(queryset.db).filter(
                pk__in=[record.pk for record in stuck]
            ).update(state=State.FAILED, locked_until=None)
            console.log_action(request, stuck, "Released stuck key (lease expired).")
            if stuck:
                signals.released(stuck, request.user, using=queryset.db)
        self.report(
            request,
            selected,
            len(stuck),
            ngettext_lazy(
                "Released %(count)d stuck key.",
                "Released %(count)d stuck keys.",
                "count",
            ),
            ngettext_lazy(
                "%(count)d was not stuck and was left alone.",
                "%(count)d were not stuck and were left alone.",
                "count",
            ),
        )


@admin.register(OpsDashboard)
class OpsDashboardAdmin(console.ReadOnlyAdmin):
    """The admin index entry for /admin/ops/."""

    def get_urls(self):
        # Its list only: a proxy of the records, its object pages would show
        # any key to whoever may view the dashboard.
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        view = self.admin_site.admin_view(self.changelist_view)
        return [path("", view, name=name)]

    def changelist_view(self, request, extra_context=None):
        return redirect("once_ops:dashboard")
