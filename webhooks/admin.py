"""Webhook receipts and rejection counts in the operations console."""

from django.contrib import admin
from django.contrib.admin import helpers
from django.db import transaction
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from idempotency.console.admin import (
    AgeFilter,
    ReadOnlyAdmin,
    log_action,
    pretty_body,
    pretty_json,
)

from .conf import webhooks_settings
from .models import WebhookReceipt, WebhookRejection
from .verifiers.base import REASONS

State = WebhookReceipt.State
STATE_COLOURS = {
    "received": "#2b6cb0",
    "processing": "#b7791f",
    "processed": "#2f855a",
    "failed": "#c53030",
    "skipped": "#718096",
}
REPLAYABLE = (State.RECEIVED, State.FAILED)
DONE = (State.PROCESSED, State.SKIPPED)


class SourceFilter(admin.SimpleListFilter):
    """The configured sources: a choice list without a SELECT DISTINCT."""

    title = _("source")
    parameter_name = "source__exact"

    def lookups(self, request, model_admin):
        return [(name, name) for name in webhooks_settings.SOURCES]

    def queryset(self, request, queryset):
        return queryset.filter(source=self.value()) if self.value() else queryset


class ReasonFilter(admin.SimpleListFilter):
    title = _("reason")
    parameter_name = "reason__exact"

    def lookups(self, request, model_admin):
        return [(reason, reason) for reason in REASONS]

    def queryset(self, request, queryset):
        return queryset.filter(reason=self.value()) if self.value() else queryset


def _enqueue_on_commit(pks):
    enqueue = webhooks_settings.ENQUEUE
    for pk in pks:
        transaction.on_commit(lambda pk=pk: enqueue(pk), robust=True)


@admin.register(WebhookReceipt)
class WebhookReceiptAdmin(ReadOnlyAdmin):
    state_colours = STATE_COLOURS
    list_display = [
        "delivery_id",
        "source",
        "event_type",
        "state_badge",
        "attempts",
        "occurred_at",
        "received_at",
        "processed_at",
    ]
    list_filter = ["state", SourceFilter, AgeFilter.on("received_at")]
    search_fields = ["delivery_id__exact"]
    search_help_text = _("Exact delivery id.")
    date_hierarchy = "received_at"
    ordering = ["-received_at"]
    actions = ["replay", "force_reprocess"]
    fields = [
        "source",
        "delivery_id",
        "event_type",
        "state",
        "attempts",
        "occurred_at",
        "received_at",
        "processed_at",
        "last_error_text",
        "pretty_headers",
        "pretty_payload",
    ]
    readonly_fields = fields

    @admin.display(description=_("last error"))
    def last_error_text(self, obj):
        return format_html("<pre>{}</pre>", obj.last_error) if obj.last_error else "—"

    @admin.display(description=_("headers"))
    def pretty_headers(self, obj):
        return pretty_json(obj.headers)

    @admin.display(description=_("body"))
    def pretty_payload(self, obj):
        return pretty_body(obj.body)

    def has_replay_permission(self, request):
        return self.has_named_permission(request, "replay_webhookreceipt")

    def has_reprocess_permission(self, request):
        return self.has_named_permission(request, "reprocess_webhookreceipt")

    @admin.action(
        permissions=["replay"],
        description=_("Replay selected received or failed receipts"),
    )
    def replay(self, request, queryset):
        # Only what has not been processed is replayed; processing locks the
        # receipt and skips a processed one, so a double click runs it once.
        chosen = list(queryset.filter(state__in=REPLAYABLE))
        queryset.model.objects.filter(
            pk__in=[r.pk for r in chosen], state=State.FAILED
        ).update(state=State.RECEIVED)
        _enqueue_on_commit(r.pk for r in chosen)
        log_action(request, chosen, "Replayed webhook receipt (enqueued again).")
        skipped = queryset.exclude(state__in=REPLAYABLE).count()
        self.report(
            request,
            len(chosen),
            skipped,
            ngettext(
                "Replayed %(count)d receipt.",
                "Replayed %(count)d receipts.",
                len(chosen),
            ),
            ngettext(
                "Skipped %(count)d already processed receipt; use "
                "force reprocess to run it again.",
                "Skipped %(count)d already processed receipts; use "
                "force reprocess to run them again.",
                skipped,
            ),
        )

    @admin.action(
        permissions=["reprocess"],
        description=_("Force reprocess of selected processed receipts"),
    )
    def force_reprocess(self, request, queryset):
        done = queryset.filter(state__in=DONE)
        if request.POST.get("post") != "yes":
            # Handlers run a second time: the operator confirms first.
            return TemplateResponse(
                request,
                "admin/webhooks/force_reprocess.html",
                {
                    **self.admin_site.each_context(request),
                    "title": _("Reprocess these receipts?"),
                    "opts": self.opts,
                    "receipts": list(done[:100]),
                    "count": done.count(),
                    "skipped": queryset.exclude(state__in=DONE).count(),
                    "queryset": queryset,
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        chosen = list(done)
        # Conditional: a second confirmation finds them received, not done.
        reopened = queryset.model.objects.filter(
            pk__in=[r.pk for r in chosen], state__in=DONE
        ).update(state=State.RECEIVED, processed_at=None)
        _enqueue_on_commit(r.pk for r in chosen)
        log_action(request, chosen, "Forced reprocessing of webhook receipt.")
        skipped = queryset.count() - reopened
        self.report(
            request,
            reopened,
            skipped,
            ngettext(
                "Queued %(count)d receipt for reprocessing.",
                "Queued %(count)d receipts for reprocessing.",
                reopened,
            ),
            ngettext(
                "Skipped %(count)d receipt not processed yet.",
                "Skipped %(count)d receipts not processed yet.",
                skipped,
            ),
        )
        return None


@admin.register(WebhookRejection)
class WebhookRejectionAdmin(ReadOnlyAdmin):
    list_display = ["day", "source", "reason", "count", "last_seen_at"]
    list_filter = [SourceFilter, ReasonFilter]
    date_hierarchy = "day"
    ordering = ["-day", "source", "reason"]
