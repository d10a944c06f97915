"""Inbox messages in the operations console."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from idempotency.console.admin import (
    AgeFilter,
    InputFilter,
    ReadOnlyAdmin,
    log_action,
    pretty_json,
)

from . import ops
from .models import InboxMessage


class DuplicatesFilter(admin.SimpleListFilter):
    title = _("duplicates")
    parameter_name = "duplicates"

    def lookups(self, request, model_admin):
        return (("yes", _("redelivered at least once")),)

    def queryset(self, request, queryset):
        return queryset.with_duplicates() if self.value() == "yes" else queryset


@admin.register(InboxMessage)
class InboxMessageAdmin(ReadOnlyAdmin):
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
        DuplicatesFilter,
        InputFilter.on("subscriber", _("subscriber")),
        AgeFilter.on("received_at"),
    ]
    search_fields = ["message_id__exact"]
    search_help_text = _("Exact message id (the outbox id for our own events).")
    date_hierarchy = "received_at"
    ordering = ["-received_at"]
    actions = ["replay"]
    fields = readonly_fields = (
        "subscriber",
        "message_id",
        "state",
        "received_at",
        "duplicates",
        "attempts",
        "last_error",
        "pretty_redrive",
    )

    @admin.display(description=_("redrive"))
    def pretty_redrive(self, obj):
        return pretty_json(obj.redrive)

    def has_replay_permission(self, request):
        return self.has_named_permission(request, "replay_inboxmessage")

    @admin.action(
        permissions=["replay"], description=_("Replay selected dead messages")
    )
    def replay(self, request, queryset):
        # The same task id and arguments, so the same message id: a second
        # replay, or a click on a row applied meanwhile, applies nothing twice.
        sent = ops.replay(queryset.dead())
        log_action(request, sent, "Replayed dead inbox message (same message id).")
        self.message_user(
            request,
            ngettext(
                "Replayed %(count)d message.", "Replayed %(count)d messages.", len(sent)
            )
            % {"count": len(sent)},
        )
