"""Inbox messages in the operations console."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from idempotency.console.admin import AgeFilter, InputFilter, ReadOnlyAdmin

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
    list_display = ["message_id", "subscriber", "duplicates", "received_at"]
    list_filter = [
        DuplicatesFilter,
        InputFilter.on("subscriber", _("subscriber")),
        AgeFilter.on("received_at"),
    ]
    search_fields = ["message_id__exact"]
    search_help_text = _("Exact message id (the outbox id for our own events).")
    date_hierarchy = "received_at"
    ordering = ["-received_at"]
    fields = readonly_fields = ("subscriber", "message_id", "received_at", "duplicates")
