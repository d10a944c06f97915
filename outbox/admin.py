"""Outbox messages in the operations console."""

import uuid

from django.contrib import admin
from django.db import transaction
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from idempotency.console import admin as console
from idempotency.shared import clock

from . import signals
from .conf import outbox_settings
from .kicks import relay_kicker
from .models import OutboxMessage
from .querysets import CLOCK_SKEW_ALLOWANCE

State = OutboxMessage.State


def _retrying():
    """Pending messages whose last publish failed: they wait out a backoff."""
    return Q(state=State.PENDING) & ~Q(last_error="")


def _due(messages):
    return messages.due(clock.now())


def _held(messages):
    # Outside ORDERED mode a dead message holds nothing back.
    return messages.held_by_dead() if outbox_settings.ORDERED else messages.none()


@admin.register(OutboxMessage)
class OutboxMessageAdmin(console.ReadOnlyAdmin):
    state_colours = {
        State.PENDING: console.Badge.WAITING,
        State.PUBLISHED: console.Badge.DONE,
        State.DEAD: console.Badge.FAILED,
    }
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
        console.ChoiceFilter.on(
            "delivery",
            _("delivery"),
            retrying=(_("failing, backing off"), lambda rows: rows.filter(_retrying())),
            due=(_("due now"), _due),
            held=(_("held by a dead older message (ORDERED)"), _held),
        ),
        console.InputFilter.on("aggregatetype", _("aggregate type")),
        console.InputFilter.on("type", _("event type")),
        console.AgeFilter,
        console.PastRetentionFilter,
    ]
    search_fields = ["id__exact", "aggregateid__exact"]
    search_help_text = _("Exact message id or aggregate id.")
    date_hierarchy = "created_at"
    actions = ["requeue"]
    version_field = "attempts"  # each relay's claim raises it
    # Whatever the application recorded, unbounded: read on a row's own page.
    heavy_fields = ("payload", "headers")
    fields = (
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
        "held_by",
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

    pretty_headers = console.json_field("headers", _("headers"))

    @admin.display(description=_("held by"))
    def held_by(self, message):
        """The dead message that keeps this one from being published."""
        if not outbox_settings.ORDERED or message.state != State.PENDING:
            return "-"
        holder = OutboxMessage.objects.using(message._state.db).dead_holding(message)
        if holder is None:
            return "-"
        return _("%(id)s, dead: requeue it to publish this one") % {"id": holder.pk}

    pretty_payload = console.json_field("payload", _("payload"))
    has_requeue_permission = console.action_permission("requeue")

    @admin.action(
        permissions=["requeue"],
        description=_("Requeue selected dead or failing messages"),
    )
    def requeue(self, request, queryset):
        # The same row, so the same message id: downstream inboxes dedupe a
        # message that did reach them. Published messages are left alone, and
        # so is a message a relay holds right now (it is being published).
        selected = queryset.count()
        queryset = console.for_writing(queryset)
        using = queryset.db
        unchanged = self.fence(request, queryset)
        with transaction.atomic(using=using):
            chosen = console.lock_unchanged(
                queryset,
                Q(state=State.DEAD) | (_retrying() & Q(locked_until=None)),
                unchanged,
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
            messages_.filter(pk__in=[m.pk for m in waiting]).update(
                available_at=now - CLOCK_SKEW_ALLOWANCE
            )
            requeued = dead + waiting
            console.log_action(
                request, requeued, "Requeued outbox message (same message id)."
            )
            if requeued:
                # Publish them now, not at the next beat.
                relay_kicker.on_commit(using)
                signals.requeued(requeued, request.user, using=using)
        self.report(
            request,
            selected,
            len(requeued),
            ngettext_lazy(
                "Requeued %(count)d message.", "Requeued %(count)d messages.", "count"
            ),
            ngettext_lazy(
                "%(count)d was published, already queued or being published, "
                "and was left alone.",
                "%(count)d were published, already queued or being published, "
                "and were left alone.",
                "count",
            ),
        )
