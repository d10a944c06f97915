"""Template tags of the operations console."""

import datetime

from django import template
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.db.models import Max, Min
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()


@register.inclusion_tag("admin/date_hierarchy.html")
def once_date_hierarchy(cl):
    """Django's date hierarchy, listing periods from two index lookups.

    The stock tag runs SELECT DISTINCT date_trunc(...) over every matching row
    (a third of a second at a million rows); this one lists every period
    between the first and the last row, so a period may link to no rows.
    """
    # A stand-in with the ChangeList's interface, not a ChangeList.
    return date_hierarchy(_ChangeListWithCheapPeriods(cl))  # type: ignore[arg-type]


@register.simple_tag
def once_seen_versions(cl):
    """The hidden field of the list's action form with each shown row's
    version (``ReadOnlyAdmin.version_field``); nothing for a list without."""
    field = getattr(cl.model_admin, "version_field", None)
    if not field:
        return ""
    versions = " ".join(f"{row.pk}:{getattr(row, field)}" for row in cl.result_list)
    return format_html('<input type="hidden" name="seen" value="{}">', versions)


class _ChangeListWithCheapPeriods:
    def __init__(self, changelist):
        self._changelist = changelist
        self.queryset = _PeriodsFromRange(changelist.queryset)

    def __getattr__(self, name):
        return getattr(self._changelist, name)


class _PeriodsFromRange:
    def __init__(self, queryset):
        self._queryset = queryset

    def aggregate(self, **aggregates):
        # The tag asks for first/last to pick its starting level.
        first, last = _bounds(self._queryset, self._field_name(aggregates))
        return {"first": first, "last": last}

    @staticmethod
    def _field_name(aggregates):
        return aggregates["first"].source_expressions[0].name

    def datetimes(self, field_name, kind):
        return self._periods(field_name, kind)

    dates = datetimes

    def _periods(self, field_name, kind):
        first, last = _bounds(self._queryset, field_name)
        if first is None:
            return []
        first, last = (_local_date(value) for value in (first, last))
        if kind == "year":
            return [
                datetime.date(year, 1, 1) for year in range(first.year, last.year + 1)
            ]
        if kind == "month":
            months = []
            year, month = first.year, first.month
            while (year, month) <= (last.year, last.month):
                months.append(datetime.date(year, month, 1))
                year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            return months
        days = (last - first).days
        return [first + datetime.timedelta(days=n) for n in range(days + 1)]


SAMPLE = 10_000


def _bounds(queryset, field_name):
    """First and last value of ``field_name``.

    A small result (a search, a rare state) is read whole: MIN/MAX under a
    selective filter can make PostgreSQL walk the entire time index. A large
    one is two index lookups.
    """
    values = list(queryset.order_by().values_list(field_name, flat=True)[: SAMPLE + 1])
    if len(values) <= SAMPLE:
        values = [value for value in values if value is not None]
        return (min(values), max(values)) if values else (None, None)
    bounds = queryset.aggregate(first=Min(field_name), last=Max(field_name))
    return bounds["first"], bounds["last"]


def _local_date(value):
    if isinstance(value, datetime.datetime):
        return (timezone.localtime(value) if timezone.is_aware(value) else value).date()
    return value
