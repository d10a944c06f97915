"""Outbox messages in the operations console."""

from django.contrib import admin
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from idempotency import clock
from idempotency.console.admin import (
    AgeFilter,
    InputFilter,
    ReadOnlyAdmin,
    log_action,
    pretty_json,
)

from .models import OutboxMessage

State = OutboxMessage.State
STATE_COLOURS = {"pending": "#b7791f", "published": "#2f855a", "dead": "#c53030"}


class RetryingFilter(admin.SimpleListFilter):
    title = _("delivery")
    parameter_name = "delivery"

    def lookups(self, request, model_admin):
        return (("retrying", _("failing, backing off")), ("due", _("due now")))

    def queryset(self, request, queryset):
        if self.value() == "retrying":
            return queryset.filter(_retrying())
        if self.value() == "due":
            return queryset.due(clock.now())
        return queryset


def _retrying():
    """Pending messages whose last publish failed: they wait out a backoff."""
    return Q(state=State.PENDING) & ~Q(last_error="")


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    state_colours = STATE_COLOURS
    list_display = [
        "id",
        "type",
        "aggregatetype",
        "aggregateid",
        "state_badge",
        "attempts",
        "created_at",
        "available_at",
        "published_at",
    ]
    list_filter = [
        "state",
        RetryingFilter,
        InputFilter.on("aggregatetype", _("aggregate type")),
        InputFilter.on("type", _("event type")),
        AgeFilter,
    ]
    search_fields = ["id__exact", "aggregateid__exact"]
    search_help_text = _("Exact message id or aggregate id.")
    date_hierarchy = "created_at"
    ordering = ["-created_at"]
    actions = ["requeue"]
    fields = [
        "id",
        "aggregatetype",
        "aggregateid",
        "type",
        "state",
        "attempts",
        "created_at",
        "available_at",
        "published_at",
        "locked_until",
        "last_error",
        "pretty_headers",
        "pretty_payload",
    ]
    readonly_fields = fields

    def get_search_results(self, request, queryset, search_term):
        # A UUID column refuses a non-UUID term; search the aggregate id only.
        import uuid

        try:
            uuid.UUID(search_term)
        except ValueError:
            if search_term:
                return queryset.filter(aggregateid=search_term), False
        return super().get_search_results(request, queryset, search_term)

    @admin.display(description=_("headers"))
    def pretty_headers(self, obj):
        return pretty_json(obj.headers)

    @admin.display(description=_("payload"))
    def pretty_payload(self, obj):
        return pretty_json(obj.payload)

    def has_requeue_permission(self, request):
        return self.has_named_permission(request, "requeue_outboxmessage")

    @admin.action(
        permissions=["requeue"],
        description=_("Requeue selected dead or failing messages"),
    )
    def requeue(self, request, queryset):
        # The same row, so the same message id: downstream inboxes dedupe a
        # message that did reach them. Published messages are left alone.
        now = clock.now()
        chosen = list(queryset.filter(Q(state=State.DEAD) | _retrying()))
        messages_ = OutboxMessage.objects
        revived = (
            messages_.filter(pk__in=[m.pk for m in chosen if m.state == State.DEAD])
            .dead()
            .requeue(now)
        )
        hurried = (
            messages_.filter(pk__in=[m.pk for m in chosen if m.state == State.PENDING])
            .filter(_retrying())
            .update(available_at=now)
        )
        log_action(request, chosen, "Requeued outbox message (same message id).")
        done = revived + hurried
        skipped = queryset.count() - done
        self.report(
            request,
            done,
            skipped,
            ngettext(
                "Requeued %(count)d message.", "Requeued %(count)d messages.", done
            ),
            ngettext(
                "%(count)d was published or already queued and was left alone.",
                "%(count)d were published or already queued and were left alone.",
                skipped,
            ),
        )
