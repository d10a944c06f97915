"""What a console panel is made of: figures that link to filtered lists."""

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import Count, Q
from django.db.models.functions import TruncHour
from django.urls import reverse
from django.utils.http import urlencode

from ..shared.steps.models import UnitRecord

# Counts stop here and show as "10000+": exact counts of huge backlogs cost
# more than they tell an operator. The only definition of the cap.
COUNT_CAP = 10_000
# Mid-steps: a worker holds the unit, or should.
UNFINISHED = (UnitRecord.State.RUNNING, UnitRecord.State.COMPENSATING)


@dataclass
class Figure:
    label: str
    value: object
    url: str = ""
    alert: bool = False
    # A column of the linked list to sort it on ("-" first: descending).
    # The admin's ?o= names a column by its position, which depends on the
    # viewer (the action checkbox is one for whoever has an action): the
    # dashboard writes it for each viewer.
    ordering: str = ""


@dataclass
class Panel:
    title: str
    figures: list[Figure] = field(default_factory=list)


def capped(count: int, cap: int = COUNT_CAP):
    """A count as the console shows it: the number, or "10000+" past the cap."""
    return f"{cap}+" if count > cap else count


def capped_count(queryset, cap: int = COUNT_CAP):
    return capped(count_up_to(queryset, cap), cap)


def count_up_to(queryset, cap: int = COUNT_CAP) -> int:
    """The rows, counted no further than ``cap + 1``: the console's figures and
    the metrics' gauges both count this way, so they agree."""
    # One row past the cap tells "exactly the cap" from "more than the cap".
    return queryset[: cap + 1].count()


def changelist_url(model, **filters) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def in_state(model, label: str, state: str, *, alert: bool = False) -> Figure:
    """The rows of ``model`` in ``state``, linking to its list filtered on it;
    ``alert``: any such row wants an operator."""
    count = capped_count(model._default_manager.filter(state=state))
    url = changelist_url(model, state__exact=state)
    return Figure(label, count, url, alert=alert and count != 0)


def stuck_leases(model, label: str, stuck_rows) -> Figure:
    """The rows of ``model`` whose lease expired mid-work, linking to its list
    filtered on them; any such row wants an operator."""
    count = capped_count(stuck_rows)
    url = changelist_url(model, lease="stuck")
    return Figure(label, count, url, alert=count != 0)


def stuck(queryset, now):
    """Units mid-steps whose lease ran out: their worker died or hangs. Or
    whose compensation stopped at an undo that raised: its lease cleared for
    the next abandon, which nothing but an operator (or a retry) brings.
    Here, not in the units' admin: the metrics read it without the admin."""
    return queryset.filter(
        Q(state__in=UNFINISHED, lease_expires_at__lt=now)
        | Q(state=UnitRecord.State.COMPENSATING, lease_expires_at=None)
    )


def hourly_counts(queryset, field_name: str, since: datetime) -> dict:
    """Count rows per hour of ``field_name`` from ``since``, one indexed query."""
    rows = (
        queryset.filter(**{f"{field_name}__gte": since})
        # In UTC, as the chart's hours are: truncated in a TIME_ZONE half an
        # hour off UTC (Asia/Kolkata), no row's hour would match one of them.
        .annotate(hour=TruncHour(field_name, tzinfo=UTC))
        .values("hour")
        # COUNT(*), not COUNT(pk): the time index alone answers it.
        .annotate(count=Count("*"))
        .order_by()
    )
    return {row["hour"]: row["count"] for row in rows}
