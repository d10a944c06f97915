"""Inbox messages in the operations console."""

from django.contrib import admin, messages
from django.db import router
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from idempotency.console import admin as console

from . import ops, signals
from .models import InboxMessage

# Dead messages whose units a replay reads in one query.
REPLAY_BATCH = 500


@admin.register(InboxMessage)
class InboxMessageAdmin(console.ReadOnlyAdmin):
    list_display = [
        "message_id",
        "subscriber",
        "state",
        "attempts",
        "duplicates",
        "received_at",
    ]
    list_filter = [
        "state",
        console.ChoiceFilter.on(
            "duplicates",
            _("duplicates"),
            yes=(_("redelivered at least once"), lambda rows: rows.with_duplicates()),
        ),
        console.InputFilter.on("subscriber", _("subscriber")),
        console.AgeFilter.on("received_at"),
        console.PastRetentionFilter,
    ]
    search_fields = ["message_id__exact"]
    search_help_text = _("Exact message id (the outbox id for our own events).")
    date_hierarchy = "received_at"
    actions = ["replay"]
    # The producer's arguments, payload included, unbounded: read on a
    # message's own page, and by a replay a batch at a time.
    heavy_fields = ("redrive",)
    fields = (
        "subscriber",
        "message_id",
        "state",
        "received_at",
        "duplicates",
        "attempts",
        "last_error",
        "pretty_redrive",
    )

    pretty_redrive = console.json_field("redrive", _("redrive"))
    has_replay_permission = console.action_permission("replay")

    @admin.action(
        permissions=["replay"], description=_("Replay selected dead messages")
    )
    def replay(self, request, queryset):
        # The same task id and arguments, so the same message id: a second
        # replay, or a click on a row applied meanwhile, applies nothing twice.
        # Read where writes go: a replica behind it still lists dead a
        # message a redelivery has applied since.
        using = router.db_for_write(InboxMessage)
        dead = list(queryset.dead().using(using))  # without their redrive
        # Left dead like a compensated one, but with its undos unfinished.
        compensating = ops.still_compensating(dead)
        sent, error = [], None
        try:
            # Per batch, their units and their redrive: thousands selected
            # would otherwise take a query each, or hold every payload at once.
            for start in range(0, len(dead), REPLAY_BATCH):
                pks = [message.pk for message in dead[start : start + REPLAY_BATCH]]
                loaded = InboxMessage.objects.using(using).in_bulk(pks)
                batch = [loaded[pk] for pk in pks if pk in loaded]
                for message in ops.replay_each(batch):
                    sent.append(message)
        except Exception as exc:  # the broker is unreachable
            # The rest would wait on the broker in turn: stop, and say so.
            # They stay dead, for a later replay.
            error = exc
        console.log_action(
            request, sent, "Replayed dead inbox message (same message id)."
        )
        if sent:
            signals.replayed(sent, request.user)
        self.message_user(
            request,
            ngettext(
                "Replayed %(count)d message.", "Replayed %(count)d messages.", len(sent)
            )
            % {"count": len(sent)},
        )
        if error is not None:
            self.message_user(
                request,
                _("Could not replay the others, which stay dead: %(error)s")
                % {"error": error},
                messages.ERROR,
            )
        elif left := len(dead) - len(sent):
            if compensating:
                self._say_still_compensating(request, len(compensating))
            if others := left - len(compensating):
                self._say_left_dead(request, others)

    def _say_still_compensating(self, request, count):
        self.message_user(
            request,
            ngettext(
                "%(count)d was left dead: its unit of work is still "
                "compensating, an undo of its steps having failed. Abandon "
                "that unit again under Units of work to finish its undos; then "
                "resend the message from its producer, as a new message, if its "
                "work should run again.",
                "%(count)d were left dead: their units of work are still "
                "compensating, an undo of their steps having failed. Abandon "
                "those units again under Units of work to finish their undos; "
                "then resend the messages from their producer, as new messages, "
                "if their work should run again.",
                count,
            )
            % {"count": count},
            messages.WARNING,
        )

    def _say_left_dead(self, request, left):
        self.message_user(
            request,
            ngettext(
                "%(count)d was left dead: its arguments were not kept, or "
                "its steps were compensated when its attempts ran out. "
                "Resend it from its producer, as a new message if its "
                "steps were compensated: under the same message id it "
                "would join the same given-up unit.",
                "%(count)d were left dead: their arguments were not kept, "
                "or their steps were compensated when their attempts ran "
                "out. Resend them from their producer, as new messages if "
                "their steps were compensated: under the same message ids "
                "they would join the same given-up units.",
                left,
            )
            % {"count": left},
            messages.WARNING,
        )
