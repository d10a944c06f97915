"""Outbox messages in the operations console."""

import uuid

from django.contrib import admin
from django.db import transaction
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from idempotency.console.admin import (
    AgeFilter,
    InputFilter,
    ReadOnlyAdmin,
    lock_unchanged,
    log_action,
    pretty_json,
)
from idempotency.shared import clock

from .kicks import relay_kicker
from .models import OutboxMessage

State = OutboxMessage.State
STATE_COLOURS: dict[str, str] = {
    State.PENDING: "#b7791f",
    State.PUBLISHED: "#2f855a",
    State.DEAD: "#c53030",
}


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
    fields = readonly_fields = (
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
    )

    def get_search_results(self, request, queryset, search_term):
        # A UUID column refuses a non-UUID term; search the aggregate id only.
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
        # message that did reach them. Published messages are left alone, and
        # so is a message a relay holds right now (it is being published).
        using = queryset.db
        with transaction.atomic(using=using):
            chosen = lock_unchanged(
                queryset, Q(state=State.DEAD) | (_retrying() & Q(locked_until=None))
            )
            # The clock is read with the rows locked: a message a concurrent
            # requeue hurried is due by now, and is not hurried again.
            now = clock.now()
            dead = [m for m in chosen if m.state == State.DEAD]
            waiting = [
                m for m in chosen if m.state != State.DEAD and m.available_at > now
            ]
            messages_ = OutboxMessage.objects.using(using)
            messages_.filter(pk__in=[m.pk for m in dead]).requeue(now)
            messages_.filter(pk__in=[m.pk for m in waiting]).update(available_at=now)
            requeued = dead + waiting
            log_action(request, requeued, "Requeued outbox message (same message id).")
            if requeued:
                # Publish them now, not at the next beat.
                relay_kicker.on_commit(using)
        done = len(requeued)
        skipped = queryset.count() - done
        self.report(
            request,
            done,
            skipped,
            ngettext(
                "Requeued %(count)d message.", "Requeued %(count)d messages.", done
            ),
            ngettext(
                "%(count)d was published, already queued or being published, "
                "and was left alone.",
                "%(count)d were published, already queued or being published, "
                "and were left alone.",
                skipped,
            ),
        )
