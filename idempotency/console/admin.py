"""What every django-once ModelAdmin shares: read-only lists, pretty JSON,
free-text and age filters, and action logging. The other apps import it."""

import json
import operator
from collections import defaultdict
from datetime import datetime, timedelta
from functools import reduce

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import flatten
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import OperationalError, router, transaction
from django.db.models import Q, QuerySet
from django.http import HttpResponseBadRequest
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..shared import clock, isolation, retention
from . import require_admin
from .panels import COUNT_CAP, count_up_to

require_admin(__name__)

from django.contrib.admin.models import CHANGE, LogEntry  # noqa: E402


class CappedPaginator(Paginator):
    """Count at most ``CAP`` rows: a COUNT(*) over a million rows on every page
    view costs more than the pages an operator will ever open."""

    CAP = COUNT_CAP

    @cached_property
    def found(self) -> int:
        """The rows, counted no further than one past the cap."""
        # Unordered: an ORDER BY under the LIMIT would walk the sort index.
        rows: QuerySet = self.object_list  # type: ignore[assignment]
        return count_up_to(rows.order_by(), self.CAP)

    @property
    def count(self) -> int:
        return min(self.found, self.CAP)

    @property
    def capped(self) -> bool:
        """More rows than the count says: the list warns that an action on
        "Select all" changes every one of them."""
        return self.found > self.CAP


class Badge:
    """The colours of state badges, by what a state means to an operator."""

    NEW = "#2b6cb0"
    WAITING = "#b7791f"
    DONE = "#2f855a"
    FAILED = "#c53030"
    SKIPPED = "#718096"


# The field of an action's POST with the version of each row the list showed.
SEEN = "seen"

# The lookups Django's own filters on a column write (choices, booleans,
# dates, empty values).
FIELD_FILTER_LOOKUPS = ("exact", "isnull", "gte", "lt", "isempty")


class ReadOnlyAdmin(admin.ModelAdmin):
    """The console is read-only; its actions are the only writes."""

    list_per_page = 50
    paginator = CappedPaginator
    show_full_result_count = False  # a COUNT(*) over a million rows per page view
    # Facets (?_facets=) count each filter choice over the whole table, uncapped.
    show_facets = admin.ShowFacets.NEVER
    # Its date hierarchy lists periods without a SELECT DISTINCT over the table.
    change_list_template = "admin/idempotency/change_list.html"
    # State value -> colour of its badge in the list (a Badge colour).
    state_colours: dict[str, str] = {}
    # The column a worker's run changes (its attempts): a list posts each
    # shown row's value with an action (``SEEN``), and ``fence()`` leaves
    # alone a row whose value changed since, so a second submit of the same
    # page does nothing to a row a worker has run again meanwhile.
    version_field: str | None = None
    # Columns no list shows, up to a megabyte each (stored bodies): left
    # unread by a list's 50 rows; a row's own page reads them with one query.
    heavy_fields: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Class attributes, not get_*() overrides: Django's changelist reads
        # ``ordering`` itself to mark the column a list is sorted on.
        if not cls.readonly_fields and cls.fields:
            cls.readonly_fields = flatten(cls.fields)  # every field it shows
        if cls.ordering is None and cls.date_hierarchy:
            cls.ordering = [f"-{cls.date_hierarchy}"]  # newest first

    def get_queryset(self, request):
        return super().get_queryset(request).defer(*self.heavy_fields)

    def changelist_view(self, request, extra_context=None):
        refused = unstorable_parameters(request.GET)
        if refused:
            # Filters and search compare these values with text columns, and
            # PostgreSQL refuses a NUL in text: a 400 instead of a DataError.
            return HttpResponseBadRequest(
                f"A NUL character cannot match anything: {', '.join(refused)}.",
                content_type="text/plain; charset=utf-8",
            )
        refused = unreachable_period(request.GET, self.date_hierarchy)
        if refused:
            # The admin computes the period's bounds in Python; past datetime's
            # range it raises OverflowError, which it does not catch: a 500.
            return HttpResponseBadRequest(
                f"No such period: {', '.join(refused)}.",
                content_type="text/plain; charset=utf-8",
            )
        return super().changelist_view(request, extra_context)

    def lookup_allowed(self, lookup, value, request=None):
        # Django allows any lookup on a model's own columns: a crafted
        # ?key__regex=( answered 500 (PostgreSQL refuses the pattern), and
        # ?response_body__contains=… scanned a whole table. Only the lookups
        # the console's filters, date hierarchy and links write; any other
        # is a 400 (DisallowedModelAdminLookup).
        allowed = lookup in self.filter_parameters(request)
        return allowed and super().lookup_allowed(lookup, value, request)

    def filter_parameters(self, request) -> set[str]:
        """The query parameters this list's filters and date hierarchy read."""
        names: set[str] = set()
        fields: list[str] = []
        for list_filter in self.get_list_filter(request):
            if isinstance(list_filter, str):
                fields.append(list_filter)
            elif isinstance(list_filter, (tuple, list)):  # (field, filter class)
                field = list_filter[0]  # a name, or a model field
                fields.append(field if isinstance(field, str) else field.name)  # type: ignore[union-attr]
            elif isinstance(list_filter, type) and issubclass(
                list_filter, admin.SimpleListFilter
            ):
                names.add(str(list_filter.parameter_name))
        for field in fields:
            names.add(field)  # a filter listing a column's values
            names.update(f"{field}__{lookup}" for lookup in FIELD_FILTER_LOOKUPS)
        if self.date_hierarchy:
            names.update(
                f"{self.date_hierarchy}__{lookup}"
                for lookup in ("year", "month", "day", "gte", "lt")
            )
        return names

    def get_object(self, request, object_id, from_field=None):
        if "\x00" in object_id:
            # No row has it, and PostgreSQL refuses it in a text key (a
            # unit's): the admin answers "does not exist", not a DataError.
            return None
        return super().get_object(request, object_id, from_field)

    def response_action(self, request, queryset, *args, **kwargs):
        refused = self.unselectable(request)
        if refused:
            # Django filters the rows by these values, and the primary key
            # field raises on one it cannot read (ValueError, ValidationError,
            # PostgreSQL on a NUL): a 400 instead of a 500.
            return HttpResponseBadRequest(
                f"No {self.opts.verbose_name} has the id {refused}: "
                "nothing was changed.",
                content_type="text/plain; charset=utf-8",
            )
        return super().response_action(request, queryset, *args, **kwargs)

    def unselectable(self, request) -> str:
        """The first selected value no row's primary key can be, shortened;
        "" when there is none, or when the action takes every row of the
        list (``select_across``), which ignores the values."""
        across = self.action_form.base_fields["select_across"]
        if across.to_python(request.POST.get("select_across")):
            return ""
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            if not self.may_be_pk(value):
                return repr(value if len(value) <= 40 else value[:40] + "…")
        return ""

    def fence(self, request, queryset) -> Q:
        """The rows an action may change: those the list did not show (a
        selection across pages), and those it showed whose version is still
        the one it showed. Warns of the others, which are left alone."""
        seen = self.seen_versions(request)
        if not seen or not self.version_field:
            return Q()  # no list behind the submit: the state checks alone
        unchanged = ~Q(pk__in=list(seen)) | as_seen(seen, self.version_field)
        if changed := queryset.exclude(unchanged).count():
            self.message_user(
                request,
                ngettext(
                    "%(count)d changed since the list was shown (it ran again, "
                    "or an operator acted on it) and was left alone: reload "
                    "the list to see it.",
                    "%(count)d changed since the list was shown (they ran again, "
                    "or an operator acted on them) and were left alone: reload "
                    "the list to see them.",
                    changed,
                )
                % {"count": changed},
                messages.WARNING,
            )
        return unchanged

    def seen_versions(self, request) -> dict:
        """The rows the list showed, by primary key, with their versions."""
        if not self.version_field:
            return {}
        seen = {}
        for pk, version in parse_versions(request.POST.get(SEEN, "")).items():
            if self.may_be_pk(pk):
                seen[self.opts.pk.to_python(pk)] = version
        return seen

    def may_be_pk(self, value: str) -> bool:
        if "\x00" in value:
            return False  # PostgreSQL refuses a NUL in text
        try:
            self.opts.pk.to_python(value)
        except ValidationError:
            return False
        return True

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, obj):
        return format_html(
            '<b style="color:{}">{}</b>',
            self.state_colours.get(obj.state, "inherit"),
            obj.get_state_display(),
        )

    def report(self, request, selected: int, done: int, done_text, skipped_text):
        """Tell the operator what an action did to ``done`` of the ``selected``
        rows, and how many it left alone.

        ``selected`` is counted before the action changes them: the action's
        queryset keeps the list's filters (``?lease=stuck``, where a figure
        links), which no longer match the rows it has just changed.

        ``done_text`` and ``skipped_text`` are ``ngettext_lazy(singular,
        plural, "count")``: the count is filled in, singular or plural.
        """
        skipped = selected - done
        text = done_text % {"count": done}
        if skipped:
            text += " " + skipped_text % {"count": skipped}
        self.message_user(request, text, messages.SUCCESS if done else messages.INFO)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_named_permission(self, request, codename):
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{codename}")


def number(token: str) -> int | None:
    """A token a page posted as a number, or None (not one)."""
    if not token.isdecimal():
        return None
    try:
        return int(token)
    except ValueError:
        # More digits than int() reads (4,300): no row's id or version.
        return None


def parse_versions(text: str) -> dict[str, int]:
    """Read a page's "pk:version pk:version ..."; the keys as posted."""
    seen = {}
    for token in text.split():
        pk, _, version = token.rpartition(":")
        if pk and (number_ := number(version)) is not None:
            seen[pk] = number_
    return seen


def as_seen(seen: dict, field: str) -> Q:
    """Rows whose ``field`` is still the version ``seen`` has for their pk
    (none if ``seen`` is empty)."""
    # One IN list per version, not one OR term per row: a page of 20,000
    # rows took 12 s to submit, most of it building, compiling and planning
    # the OR.
    by_version = defaultdict(list)
    for pk, version in seen.items():
        by_version[version].append(pk)
    return reduce(
        operator.or_,
        (Q(pk__in=pks, **{field: version}) for version, pks in by_version.items()),
        Q(pk__in=[]),
    )


def action_permission(verb: str):
    """An admin's ``has_<verb>_permission``, for actions declaring
    ``permissions=[verb]``: the user holds the model's ``<verb>_<model>``."""

    def has_permission(self, request):
        return self.has_named_permission(request, f"{verb}_{self.opts.model_name}")

    return has_permission


def json_field(field: str, description):
    """A read-only display of the JSON in ``field``."""
    return admin.display(description=description)(
        lambda self, obj: pretty_json(getattr(obj, field))
    )


def body_field(field: str, description):
    """A read-only display of the stored bytes in ``field``."""
    return admin.display(description=description)(
        lambda self, obj: pretty_body(getattr(obj, field))
    )


def unstorable_parameters(query) -> list[str]:
    """The names of the query parameters with a NUL in their name or value."""
    return sorted(
        repr(name)
        for name, values in query.lists()
        if "\x00" in name or any("\x00" in value for value in values)
    )


def unreachable_period(query, field: str | None) -> list[str]:
    """The names of the date hierarchy's parameters in ``query`` when the
    period they name, or the one after it (its end), is not a datetime."""
    names = {part: f"{field}__{part}" for part in ("year", "month", "day")}
    if not field or names["year"] not in query:
        return []
    year, month, day = (query.get(name) for name in names.values())
    try:
        period = datetime(int(year), int(month or 1), int(day or 1))
        # Its end, as the admin computes it: a datetime too, or it raises.
        if day is not None:
            period += timedelta(days=1)
        elif month is not None:
            period += timedelta(days=32)
        else:
            period = period.replace(year=period.year + 1)
    except (ValueError, OverflowError):
        return [repr(name) for name in names.values() if name in query]
    return []


def pretty_json(value) -> str:
    if value in (None, "", {}, []):
        return "—"
    return format_html(
        '<pre class="once-json">{}</pre>',
        json.dumps(value, indent=2, sort_keys=True, default=str),
    )


def pretty_body(raw) -> str:
    """Show stored bytes as pretty JSON when they are JSON, else as text."""
    if raw is None:
        return "—"
    data = bytes(raw)
    try:
        return pretty_json(json.loads(data))
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
        text = data.decode("utf-8", errors="replace")
        return format_html('<pre class="once-json">{}</pre>', text)


def for_writing(queryset: QuerySet) -> QuerySet:
    """``queryset`` on the database its model's writes go to.

    A changelist's queryset reads through the router's read database (a
    replica, say): an action's transaction, locks and writes belong on the
    one writes go to, as Django's own delete action's do.
    """
    return queryset.using(router.db_for_write(queryset.model))


def lock_unchanged(queryset, *conditions) -> list:
    """Lock and return the rows of ``queryset`` that still meet ``conditions``
    (Q objects: the state an action acts on, the version the operator saw).

    Call it inside ``transaction.atomic()``: the rows stay as returned until
    the action's transaction ends, so what it changes is what it checked.
    SKIP LOCKED: a row another submit or a worker holds right now is changing;
    it is left to that one rather than waited for and changed twice.

    Under REPEATABLE READ or SERIALIZABLE, inside a request's transaction
    (``ATOMIC_REQUESTS``) whose snapshot predates a row's change, PostgreSQL
    refuses the lock (a serialization failure) and no new snapshot can be
    taken: every row is left alone, as one that moved on since is.
    """
    rows = queryset.filter(*conditions).select_for_update(skip_locked=True)
    try:
        # A savepoint: the caller's transaction goes on after the refusal.
        with transaction.atomic(using=queryset.db):
            return list(rows)
    except OperationalError as exc:
        if not isolation.is_serialization_failure(exc):
            raise
        return []


def log_action(request, objects, message: str) -> None:
    """Record an operator's action on each object in the admin log."""
    objects = list(objects)
    if objects:
        LogEntry.objects.log_actions(request.user.pk, objects, CHANGE, message)


def _filter_name(field: str, suffix: str) -> str:
    return "".join(part.title() for part in field.split("_")) + suffix


class ChoiceFilter(admin.SimpleListFilter):
    """A few named choices, each narrowing the rows its own way.

    ``ChoiceFilter.on("lease", _("lease"), stuck=(_("stuck"), stuck_rows))``
    lists "stuck" and filters by ``stuck_rows(queryset)`` when it is chosen.
    """

    narrowings: dict = {}

    @classmethod
    def on(cls, parameter: str, title, **narrowings) -> type["ChoiceFilter"]:
        """``narrowings``: each choice's value -> (label, queryset -> queryset)."""
        attributes = {
            "parameter_name": parameter,
            "title": title,
            "narrowings": narrowings,
        }
        return type(_filter_name(parameter, "Filter"), (cls,), attributes)

    def lookups(self, request, model_admin):
        return [(value, label) for value, (label, _narrow) in self.narrowings.items()]

    def queryset(self, request, queryset):
        if self.value() not in self.narrowings:
            return queryset
        _label, narrow = self.narrowings[self.value()]
        return narrow(queryset)


class InputFilter(admin.SimpleListFilter):
    """A free-text exact filter for high-cardinality columns (scope, source).

    A choice list would run SELECT DISTINCT over the whole table.
    """

    template = "admin/idempotency/input_filter.html"
    field = ""

    @classmethod
    def on(cls, field: str, title) -> type["InputFilter"]:
        """A filter on ``field`` (also its query parameter), titled ``title``."""
        attributes = {"field": field, "parameter_name": field, "title": title}
        return type(_filter_name(field, "Filter"), (cls,), attributes)

    def lookups(self, request, model_admin):
        # Django shows a filter only when it has choices; one dummy suffices.
        return ((None, None),)

    def choices(self, changelist):
        query = changelist.get_query_string(remove=[self.parameter_name])
        yield {"query_string": query, "value": self.value() or ""}

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(**{self.field: self.value()})
        return queryset


class AgeFilter(admin.SimpleListFilter):
    """Rows older than an hour, a day or a week, by ``field``.

    ``AgeFilter.on("received_at")`` makes one for another column.
    """

    title = _("age")
    parameter_name = "age"
    field = "created_at"
    AGES = {"1h": 1, "24h": 24, "7d": 24 * 7}

    @classmethod
    def on(cls, field: str) -> type["AgeFilter"]:
        return type(_filter_name(field, "AgeFilter"), (cls,), {"field": field})

    def lookups(self, request, model_admin):
        return (
            ("1h", _("older than 1 hour")),
            ("24h", _("older than 24 hours")),
            ("7d", _("older than 7 days")),
        )

    def queryset(self, request, queryset):
        hours = self.AGES.get(self.value() or "")
        if hours is None:
            return queryset
        cutoff = clock.now() - timedelta(hours=hours)
        return queryset.filter(**{f"{self.field}__lt": cutoff})


class PastRetentionFilter(admin.SimpleListFilter):
    """The rows the retention purge would delete now: the dashboard's
    "awaiting purge" figures link here, so an operator sees them first."""

    title = _("retention")
    parameter_name = "retention"

    def lookups(self, request, model_admin):
        return (("past", _("past it (awaiting purge)")),)

    def queryset(self, request, queryset):
        if self.value() != "past":
            return queryset
        rows = retention.purgeable_rows(queryset.model)
        if rows is None:
            return queryset.none()
        # The purge's own conditions, on its indexes, read where the list reads.
        return queryset & rows
