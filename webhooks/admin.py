"""Webhook receipts and rejection counts in the operations console."""

from datetime import timedelta
from functools import partial

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import display_for_value
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Case, F, Q, TextField, When
from django.db.models.functions import Cast
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext, ngettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from idempotency.console import admin as console
from idempotency.shared import clock
from idempotency.shared.conf import shared_settings
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.units import WEBHOOKS, Unit

from . import signals, sources
from .conf import webhooks_settings
from .exceptions import REASONS, SourceMisconfigured
from .handlers import handlers_for, runs_steps
from .models import WebhookReceipt, WebhookRejection
from .verifiers.base import EARLIEST_EVENT_TIME, LATEST_EVENT_TIME, stored_event_time

State = WebhookReceipt.State
# Units looked up per query when a replay checks which receipts gave up.
GIVEN_UP_BATCH = 1000
UnitState = UnitRecord.State
GIVEN_UP = (UnitState.COMPENSATING, UnitState.COMPENSATED)


class _FixedValuesFilter(admin.SimpleListFilter):
    """Filter on one field by a list of values known without a query: no
    SELECT DISTINCT over the receipts."""

    field: str

    def values(self):
        raise NotImplementedError

    def lookups(self, request, model_admin):
        return [(value, value) for value in self.values()]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


class SourceFilter(_FixedValuesFilter):
    """The configured sources."""

    title = _("source")
    parameter_name = "source__exact"
    field = "source"

    def values(self):
        return webhooks_settings.SOURCES


class ReasonFilter(_FixedValuesFilter):
    title = _("reason")
    parameter_name = "reason__exact"
    field = "reason"

    def values(self):
        return REASONS


def _span(delta: timedelta) -> str:
    """A duration, exactly, in the largest unit that divides it ("30 days")."""
    total = int(delta.total_seconds())
    units = (
        (86400, lambda n: ngettext("%d day", "%d days", n)),
        (3600, lambda n: ngettext("%d hour", "%d hours", n)),
        (60, lambda n: ngettext("%d minute", "%d minutes", n)),
        (1, lambda n: ngettext("%d second", "%d seconds", n)),
    )
    for size, name in units:
        if total >= size and total % size == 0:
            return name(total // size) % (total // size)
    return gettext("%s seconds") % f"{delta.total_seconds():g}"


def replay_notes() -> list[str]:
    """What each configured source does with a delivery sent to it again."""
    notes = []
    for name in webhooks_settings.SOURCES:
        try:
            source = sources.get(name)
        except SourceMisconfigured:
            notes.append(
                gettext(
                    "%(source)s: misconfigured, every delivery is refused "
                    "(manage.py check says why)."
                )
                % {"source": name}
            )
            continue
        if source is None:  # pragma: no cover - listed, so configured
            continue
        if source.replay_horizon is None:
            note = gettext(
                "%(source)s: signed time. A delivery more than %(tolerance)s "
                "from its signing is refused; within that, a resend is a "
                "duplicate."
            ) % {
                "source": name,
                "tolerance": _span(timedelta(seconds=source.verifier.tolerance)),
            }
        else:
            # No signed time: only the kept receipt tells a captured body again.
            note = gettext(
                "%(source)s: no signed time. A body resent more than "
                "%(retention)s (RETENTION) after its receipt was processed runs "
                "its handlers again; the source accepts that after "
                "%(horizon)s (REPLAY_HORIZON). A steps handler's steps run "
                "again only once their unit of work is purged too, untouched "
                "for %(units)s (UNIT_RETENTION): until then the resend joins "
                "it, and each step returns its stored result."
            ) % {
                "source": name,
                "retention": _span(webhooks_settings.RETENTION),
                "horizon": _span(source.replay_horizon),
                "units": _span(shared_settings.UNIT_RETENTION),
            }
        notes.append(note)
    return notes


def _enqueue_on_commit(pks, using):
    enqueue = webhooks_settings.ENQUEUE
    for pk in pks:
        transaction.on_commit(partial(enqueue, pk), using=using, robust=True)


@admin.register(WebhookReceipt)
class WebhookReceiptAdmin(console.ReadOnlyAdmin):
    state_colours = {
        State.RECEIVED: console.Badge.NEW,
        State.PROCESSED: console.Badge.DONE,
        State.FAILED: console.Badge.FAILED,
        State.SKIPPED: console.Badge.SKIPPED,
    }
    list_display = [
        "delivery_id",
        "source",
        "event_type",
        "state_badge",
        "attempts",
        "occurred",
        "received_at",
        "processed_at",
    ]
    list_filter = [
        "state",
        SourceFilter,
        console.AgeFilter.on("received_at"),
        console.PastRetentionFilter,
    ]
    search_fields = ["delivery_id__exact"]
    search_help_text = _("Exact delivery id.")
    date_hierarchy = "received_at"
    actions = ["replay", "force_reprocess"]
    version_field = "attempts"
    heavy_fields = ("body", "headers")
    # Above the list: the replays each source accepts (replay_notes).
    change_list_template = "admin/webhooks/webhookreceipt/change_list.html"
    fields = (
        "source",
        "delivery_id",
        "event_type",
        "state",
        "attempts",
        "worker_deaths",
        "occurred",
        "received_at",
        "processed_at",
        "last_error_text",
        "pretty_headers",
        "pretty_payload",
    )

    def get_queryset(self, request):
        # The provider chose occurred_at: a value the database keeps but Python
        # cannot hold (a year-0 time stored before intake checked it) must not
        # take the console down with it. Never loaded as such; see occurred().
        return (
            super()
            .get_queryset(request)
            .defer("occurred_at")
            .annotate(
                occurred_at_readable=Case(
                    When(
                        occurred_at__range=(
                            stored_event_time(EARLIEST_EVENT_TIME),
                            stored_event_time(LATEST_EVENT_TIME),
                        ),
                        then=F("occurred_at"),
                    ),
                    default=None,
                ),
                occurred_at_text=Cast("occurred_at", TextField()),
            )
        )

    @admin.display(description=_("occurred at"), ordering="occurred_at")
    def occurred(self, obj):
        if obj.occurred_at_readable is not None:
            return display_for_value(obj.occurred_at_readable, "—")
        # Out of Python's range: shown as the database writes it.
        return obj.occurred_at_text or "—"

    @admin.display(description=_("last error"))
    def last_error_text(self, obj):
        return format_html("<pre>{}</pre>", obj.last_error) if obj.last_error else "—"

    pretty_headers = console.json_field("headers", _("headers"))
    pretty_payload = console.body_field("body", _("body"))

    def changelist_view(self, request, extra_context=None):
        context = {**(extra_context or {}), "replay_notes": replay_notes()}
        return super().changelist_view(request, context)

    has_replay_permission = console.action_permission("replay")
    has_reprocess_permission = console.action_permission("reprocess")

    @admin.action(
        permissions=["replay"],
        description=_("Replay selected received or failed receipts"),
    )
    def replay(self, request, queryset):
        # Only what has not been processed is replayed, as this request reads
        # it: of two concurrent replays one reopens a failed receipt and the
        # other finds it held or received. A received receipt is only enqueued
        # again; processing locks it and skips it once processed, so its
        # handlers still run once.
        # A receipt whose steps were compensated (its last attempt gave its
        # unit up) would run no step: it would end processed, applying nothing.
        # One still compensating (an undo raised) is left to Units of work,
        # whose abandon finishes its undos.
        # Read where writes go: a replica behind it may not show a unit
        # that gave up yet, and the receipt would be reopened.
        queryset = console.for_writing(queryset)
        failed = queryset.filter(state=State.FAILED)
        compensated = _given_up(failed, UnitState.COMPENSATED)
        compensating = _given_up(failed, UnitState.COMPENSATING)
        given_up = compensated + compensating
        selected = queryset.exclude(pk__in=given_up).count()
        replayed = _reopen(
            request,
            queryset,
            Q(state__in=WebhookReceipt.REPLAYABLE),
            ~Q(pk__in=given_up),
            # A worker running its steps holds it by its lease alone, not
            # the row lock: its run goes on, and would be reported replayed.
            Q(locked_until=None) | Q(locked_until__lte=clock.now()),
            self.fence(request, queryset),
            log="Replayed webhook receipt (enqueued again).",
            forced=False,
        )
        self.report(
            request,
            selected,
            len(replayed),
            ngettext_lazy(
                "Replayed %(count)d receipt.", "Replayed %(count)d receipts.", "count"
            ),
            ngettext_lazy(
                "Skipped %(count)d receipt already processed or being "
                "processed; use force reprocess to run a processed one again.",
                "Skipped %(count)d receipts already processed or being "
                "processed; use force reprocess to run a processed one again.",
                "count",
            ),
        )
        for count, say in (
            (len(compensating), _still_compensating_message),
            (len(compensated), _compensated_message),
        ):
            if count:
                self.message_user(request, say(count), messages.WARNING)

    @admin.action(
        permissions=["reprocess"],
        description=_("Force reprocess of selected processed receipts"),
    )
    def force_reprocess(self, request, queryset):
        if request.POST.get("post") != "yes":
            # Handlers run a second time: the operator confirms first.
            return self._confirm_reprocess(request, queryset)
        if "selected" in request.POST:
            # The page's selection, in one field: it posts select_across.
            queryset = queryset.filter(pk__in=_parse_ids(request.POST["selected"]))
        # Only the receipts still as the page showed them: processing bumps
        # attempts, so a second submit of the page (or a concurrent one)
        # finds them reopened or processed again and leaves them alone.
        seen = _parse_versions(request.POST.get("versions", ""))
        # Read where writes go, as the replay does.
        queryset = console.for_writing(queryset)
        # A steps handler's finished unit would return every step's stored
        # result: nothing would run again, so none is queued as if it would.
        steps_finished = _steps_finished(
            queryset.filter(_as_seen(seen), state__in=WebhookReceipt.FINISHED)
        )
        # Those are reported on their own, below, with why.
        selected = queryset.exclude(pk__in=steps_finished).count()
        reopened = _reopen(
            request,
            queryset,
            Q(state__in=WebhookReceipt.FINISHED),
            _as_seen(seen),
            ~Q(pk__in=steps_finished),
            log="Forced reprocessing of webhook receipt.",
            forced=True,
        )
        self.report(
            request,
            selected,
            len(reopened),
            ngettext_lazy(
                "Queued %(count)d receipt for reprocessing.",
                "Queued %(count)d receipts for reprocessing.",
                "count",
            ),
            ngettext_lazy(
                "Skipped %(count)d receipt not processed, or changed since "
                "the confirmation page was shown.",
                "Skipped %(count)d receipts not processed, or changed since "
                "the confirmation page was shown.",
                "count",
            ),
        )
        if steps_finished:
            self.message_user(
                request, _steps_finished_message(len(steps_finished)), messages.WARNING
            )
        return None

    def _confirm_reprocess(self, request, queryset):
        done = queryset.filter(state__in=WebhookReceipt.FINISHED)
        selected = _selected_ids(queryset)
        if selected is None:
            return self._refuse_too_many(request, queryset)
        # The version of each receipt the operator is shown.
        versions = " ".join(
            f"{pk}:{attempts}" for pk, attempts in done.values_list("pk", "attempts")
        )
        if _too_big_to_post(selected, versions):
            return self._refuse_too_many(request, queryset)
        steps_finished = _steps_finished(done)
        return TemplateResponse(
            request,
            "admin/webhooks/force_reprocess.html",
            {
                **self.admin_site.each_context(request),
                "title": _("Reprocess these receipts?"),
                "opts": self.opts,
                "receipts": list(done.exclude(pk__in=steps_finished)[:100]),
                "count": done.count() - len(steps_finished),
                "skipped": queryset.exclude(state__in=WebhookReceipt.FINISHED).count(),
                "steps_finished": _steps_finished_message(len(steps_finished))
                if steps_finished
                else "",
                "selected": selected,
                "versions": versions,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            },
        )

    def _refuse_too_many(self, request, queryset) -> None:
        count = queryset.count()
        self.message_user(request, _too_many_message(count), messages.ERROR)


# Room for the confirmation form's other fields (its CSRF token, the action).
FORM_FIELDS_ROOM = 1024
# The fewest bytes an id takes in the form: a digit and a separator.
ID_MIN_BYTES = 2


def _selected_ids(queryset) -> list[int] | None:
    """The ids of ``queryset``, or None when more than the confirmation form
    could post: read no further than that, so a selection across millions
    of receipts is refused without loading them."""
    ids = queryset.values_list("pk", flat=True)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None:
        return list(ids)
    most = max(0, limit - FORM_FIELDS_ROOM) // ID_MIN_BYTES
    selected = list(ids[: most + 1])
    return None if len(selected) > most else selected


def _too_big_to_post(selected, versions: str) -> bool:
    """Whether the confirmation form would post more than Django reads
    (DATA_UPLOAD_MAX_MEMORY_SIZE): its "yes" would be answered 400."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None:
        return False
    body = urlencode({"selected": " ".join(map(str, selected)), "versions": versions})
    return len(body) + FORM_FIELDS_ROOM > limit


def _too_many_message(count: int) -> str:
    return ngettext(
        "%(count)d receipt is more than one confirmation page can carry "
        "(DATA_UPLOAD_MAX_MEMORY_SIZE): nothing was queued. Narrow the list "
        "(by source, state or age) and reprocess it in parts.",
        "%(count)d receipts are more than one confirmation page can carry "
        "(DATA_UPLOAD_MAX_MEMORY_SIZE): nothing was queued. Narrow the list "
        "(by source, state or age) and reprocess it in parts.",
        count,
    ) % {"count": count}


def _given_up(receipts, state) -> list[int]:
    """The ids of ``receipts`` whose unit of steps gave up and is ``state``
    (compensating, or compensated)."""
    rows = receipts.values_list("pk", "source", "delivery_id")
    return _units_in(rows, (state,), using=receipts.db)


def _steps_finished(receipts) -> list[int]:
    """The ids of ``receipts`` run by steps handlers whose unit is finished
    (done, or given up): run again, each step would return its recovery
    point, or its unit would stay given up, and nothing would run."""
    steps_by_event: dict[tuple[str, str], bool] = {}

    def by_steps(source, event_type) -> bool:
        if (source, event_type) not in steps_by_event:
            try:
                found = runs_steps(handlers_for(source, event_type))
            except ImproperlyConfigured:
                found = False  # processing refuses the mix, and says why
            steps_by_event[source, event_type] = found
        return steps_by_event[source, event_type]

    rows = receipts.values_list("pk", "source", "delivery_id", "event_type")
    return _units_in(
        [
            (pk, source, delivery)
            for pk, source, delivery, event in rows
            if by_steps(source, event)
        ],
        (UnitState.DONE, *GIVEN_UP),
        using=receipts.db,
    )


def _units_in(receipts, states, *, using) -> list[int]:
    """The ids of ``receipts`` (pk, source, delivery id) whose unit of steps
    is in one of ``states``; read on ``using``, the receipts' database, where
    processing keeps their units."""
    by_identity = {
        Unit(WEBHOOKS, (source, delivery_id)).identity: pk
        for pk, source, delivery_id in receipts
    }
    identities = list(by_identity)
    found: list[str] = []
    for start in range(0, len(identities), GIVEN_UP_BATCH):
        found += (
            UnitRecord.objects.using(using)
            .filter(pk__in=identities[start : start + GIVEN_UP_BATCH], state__in=states)
            .values_list("pk", flat=True)
        )
    return [by_identity[identity] for identity in found]


def _still_compensating_message(count: int) -> str:
    return ngettext(
        "%(count)d failed receipt was left failed: its unit of work is still "
        "compensating, an undo of its steps having failed. Abandon that unit "
        "again under Units of work to finish its undos. Only a new event, "
        "under a new delivery id, runs the work again.",
        "%(count)d failed receipts were left failed: their units of work are "
        "still compensating, an undo of their steps having failed. Abandon "
        "those units again under Units of work to finish their undos. Only new "
        "events, under new delivery ids, run the work again.",
        count,
    ) % {"count": count}


def _compensated_message(count: int) -> str:
    return ngettext(
        "%(count)d failed receipt was left failed: its steps were "
        "compensated when its attempts ran out, so a replay would "
        "apply nothing, nor would the provider's resend of its "
        "delivery id (the same unit). Only a new event, under a new "
        "delivery id, runs the work again.",
        "%(count)d failed receipts were left failed: their steps were "
        "compensated when their attempts ran out, so a replay would "
        "apply nothing, nor would the provider's resend of their "
        "delivery ids (the same units). Only new events, under new "
        "delivery ids, run the work again.",
        count,
    ) % {"count": count}


def _steps_finished_message(count: int) -> str:
    return ngettext(
        "%(count)d receipt was left alone: its steps handlers finished their "
        "unit of work (done, or compensated), so each step would return its "
        "stored result (its recovery point) or stay undone, and nothing would "
        "run again. A step's effect is redone only by a new event, under a "
        "new delivery id.",
        "%(count)d receipts were left alone: their steps handlers finished "
        "their units of work (done, or compensated), so each step would "
        "return its stored result (its recovery point) or stay undone, and "
        "nothing would run again. A step's effect is redone only by a new "
        "event, under a new delivery id.",
        count,
    ) % {"count": count}


def _reopen(
    request, queryset, *conditions, log: str, forced: bool
) -> list[WebhookReceipt]:
    """Reopen the receipts of ``queryset`` meeting ``conditions`` (received, to
    be processed again), log them, enqueue them after the commit and report
    them (``forced``: processed ones run again); return them."""
    queryset = console.for_writing(queryset)
    with transaction.atomic(using=queryset.db):
        reopened = console.lock_unchanged(queryset, *conditions)
        WebhookReceipt.objects.using(queryset.db).filter(
            pk__in=[r.pk for r in reopened]
        ).update(state=State.RECEIVED, processed_at=None, worker_deaths=0)
        console.log_action(request, reopened, log)
        _enqueue_on_commit((r.pk for r in reopened), queryset.db)
    if reopened:
        # A submit that reopened nothing (all moved on, or none replayable)
        # replayed nothing: no signal, no log line, no count of 0.
        signals.replayed(reopened, request.user, forced=forced, using=queryset.db)
    return reopened


def _parse_ids(text: str) -> list[int]:
    """Read the confirmation page's "pk pk ..."."""
    ids = (console.number(token) for token in text.split())
    return [pk for pk in ids if pk is not None]


def _parse_versions(text: str) -> dict[int, int]:
    """Read the confirmation page's "pk:attempts pk:attempts ..."."""
    versions = console.parse_versions(text).items()
    ids = ((console.number(pk), attempts) for pk, attempts in versions)
    return {pk: attempts for pk, attempts in ids if pk is not None}


def _as_seen(seen: dict[int, int]) -> Q:
    """Receipts whose attempts are still those of ``seen`` (none if empty)."""
    return console.as_seen(seen, "attempts")


@admin.register(WebhookRejection)
class WebhookRejectionAdmin(console.ReadOnlyAdmin):
    list_display = ["day", "source", "reason", "count", "last_seen_at"]
    list_filter = [SourceFilter, ReasonFilter, console.PastRetentionFilter]
    date_hierarchy = "day"
    ordering = ["-day", "source", "reason"]
