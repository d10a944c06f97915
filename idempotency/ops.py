"""The operations dashboard at /admin/ops/: figures from every app, one chart.

Apps contribute from their ``AppConfig.ready()`` with ``register_panel`` and
``register_series``; this module never imports them.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.db.models.functions import TruncHour
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from . import clock, retention
from .models import IdempotencyRecord

# Counts above this show as "10000+": exact counts of huge backlogs cost more
# than they tell an operator.
COUNT_CAP = 10_000
CHART_HOURS = 24


@dataclass
class Figure:
    label: str
    value: object
    url: str = ""
    alert: bool = False


@dataclass
class Panel:
    title: str
    figures: list[Figure] = field(default_factory=list)


_panels: list[Callable[[datetime], Panel]] = []
_series: list[tuple[str, Callable[[datetime], dict]]] = []


def register_panel(build: Callable[[datetime], Panel]) -> None:
    """Add a panel: ``build(now)`` returns a ``Panel`` of figures."""
    if build not in _panels:
        _panels.append(build)


def register_series(label: str, counts: Callable[[datetime], dict]) -> None:
    """Add a chart line: ``counts(since)`` maps each hour to a count."""
    if label not in dict(_series):
        _series.append((label, counts))


def capped_count(queryset, cap=COUNT_CAP):
    count = queryset[: cap + 1].count()
    return f"{cap}+" if count > cap else count


def changelist_url(model, **filters) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def hourly_counts(queryset, field_name: str, since: datetime) -> dict:
    """Count rows per hour of ``field_name`` from ``since``, one indexed query."""
    rows = (
        queryset.filter(**{f"{field_name}__gte": since})
        .annotate(hour=TruncHour(field_name))
        .values("hour")
        # COUNT(*), not COUNT(pk): the time index alone answers it.
        .annotate(count=Count("*"))
        .order_by()
    )
    return {row["hour"]: row["count"] for row in rows}


def idempotency_panel(now) -> Panel:
    records = IdempotencyRecord.objects
    day_ago = now - timedelta(hours=24)
    stuck = capped_count(records.stuck(now))
    return Panel(
        _("Idempotency keys"),
        [
            Figure(
                _("pending keys"),
                capped_count(records.filter(state="pending")),
                changelist_url(IdempotencyRecord, state__exact="pending"),
            ),
            Figure(
                _("stuck leases"),
                stuck,
                changelist_url(IdempotencyRecord, lease="stuck"),
                alert=stuck != 0,
            ),
            Figure(
                _("failed attempts (24 h)"),
                capped_count(records.filter(state="failed", created_at__gte=day_ago)),
                changelist_url(
                    IdempotencyRecord,
                    state__exact="failed",
                    created_at__gte=day_ago.isoformat(),
                ),
            ),
        ],
    )


def _chart(now):
    hours = [
        (now - timedelta(hours=offset)).replace(minute=0, second=0, microsecond=0)
        for offset in range(CHART_HOURS - 1, -1, -1)
    ]
    since = hours[0]
    lines = []
    for label, counts in _series:
        by_hour = counts(since)
        lines.append((label, [by_hour.get(hour, 0) for hour in hours]))
    return _svg_chart(hours, lines)


COLOURS = ("#2b6cb0", "#2f855a", "#b7791f", "#c53030")


def _svg_chart(hours, lines, width=720, height=200, pad=32):
    """Lay out an SVG line chart; the template only draws what this returns."""
    peak = max([1] + [max(values) for _, values in lines if values])
    step = (width - 2 * pad) / max(1, len(hours) - 1)

    def point(index, value):
        x = pad + index * step
        y = height - pad - (value / peak) * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    series = [
        {
            "label": label,
            "colour": COLOURS[i % len(COLOURS)],
            "points": " ".join(point(j, v) for j, v in enumerate(values)),
            "total": sum(values),
        }
        for i, (label, values) in enumerate(lines)
    ]
    ticks = [
        {"x": f"{pad + i * step:.1f}", "label": hour.strftime("%H:00")}
        for i, hour in enumerate(hours)
        if i % 4 == 0
    ]
    return {
        "width": width,
        "height": height,
        "pad": pad,
        "peak": peak,
        "series": series,
        "ticks": ticks,
        "baseline": height - pad,
        "right": width - pad,
    }


def _can_view(request):
    return request.user.has_perm("idempotency.view_opsdashboard")


def dashboard(request):
    if not _can_view(request):
        raise PermissionDenied
    now = clock.now()
    panels = [build(now) for build in _panels]
    awaiting = retention.purgeable_counts(now, cap=COUNT_CAP)
    context = {
        **admin.site.each_context(request),
        "title": _("Operations"),
        "panels": panels,
        "awaiting_purge": [
            {"kind": kind, "count": f"{COUNT_CAP}+" if count > COUNT_CAP else count}
            for kind, count in awaiting.items()
        ],
        "chart": _chart(now),
        "can_purge": request.user.has_perm("idempotency.purge_records"),
        "now": now,
    }
    return TemplateResponse(request, "admin/idempotency/ops.html", context)


def purge(request):
    """Confirm, then purge every kind past its retention, in batches."""
    if not request.user.has_perm("idempotency.purge_records"):
        raise PermissionDenied
    if request.method == "POST" and request.POST.get("confirm") == "yes":
        counts = retention.purge()
        total = sum(counts.values())
        summary = ", ".join(f"{kind}: {count}" for kind, count in counts.items())
        LogEntry.objects.create(
            user_id=request.user.pk,
            action_flag=CHANGE,
            object_repr="retention purge"[:200],
            change_message=f"Purged records past retention ({summary}).",
        )
        messages.success(
            request,
            ngettext(
                "Purged %(count)d record past its retention (%(summary)s).",
                "Purged %(count)d records past their retention (%(summary)s).",
                total,
            )
            % {"count": total, "summary": summary},
        )
        return redirect("once_ops:dashboard")
    context = {
        **admin.site.each_context(request),
        "title": _("Purge records past their retention?"),
        "counts": retention.purgeable_counts(),
    }
    return TemplateResponse(request, "admin/idempotency/purge_confirm.html", context)
