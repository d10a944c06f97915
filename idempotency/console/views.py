"""The dashboard at /admin/ops/ and the purge behind its confirmation page."""

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import transaction
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import Resolver404, get_script_prefix, resolve
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..shared import clock, contributions, retention
from .chart import hourly_chart
from .panels import COUNT_CAP, capped


def dashboard(request):
    if not request.user.has_perm("idempotency.view_opsdashboard"):
        raise PermissionDenied
    now = clock.now()
    try:
        awaiting = retention.purgeable_counts(now, cap=COUNT_CAP)
    except ImproperlyConfigured as exc:
        # A retention that would break a guarantee: say so instead of counting.
        messages.error(request, str(exc))
        awaiting = {}
    panels = [build(now) for build in contributions.console_panels()]
    for figure in (figure for panel in panels for figure in panel.figures):
        if figure.url and not may_follow(request, figure.url):
            figure.url = ""
    context = {
        **admin.site.each_context(request),
        "title": _("Operations"),
        "panels": panels,
        "awaiting_purge": [
            {"kind": kind, "count": capped(count, COUNT_CAP)}
            for kind, count in awaiting.items()
        ],
        "chart": hourly_chart(now, contributions.console_series()),
        "can_purge": request.user.has_perm("idempotency.purge_records"),
        "count_cap": COUNT_CAP,
        "now": now,
    }
    return TemplateResponse(request, "admin/idempotency/ops.html", context)


def may_follow(request, url: str) -> bool:
    """Whether the viewer may open ``url``: a figure links only where it may."""
    path = url.split("?", 1)[0]
    # reverse() wrote the site's prefix (SCRIPT_NAME) in; resolve() wants it out.
    prefix = get_script_prefix()
    if path.startswith(prefix):
        path = "/" + path[len(prefix) :]
    try:
        match = resolve(path)
    except Resolver404:
        return False
    # The admin sets ``model_admin`` on the views of each ModelAdmin it serves.
    model_admin = getattr(match.func, "model_admin", None)
    return model_admin is None or model_admin.has_view_or_change_permission(request)


# Each batch commits on its own: ATOMIC_REQUESTS would hold every batch's row
# locks, and the rests between them, until the whole purge ends.
@transaction.non_atomic_requests
def purge(request):
    """Confirm, then purge every kind past its retention, in batches."""
    if not request.user.has_perm("idempotency.purge_records"):
        raise PermissionDenied
    try:
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            _purge(request)
            return redirect("once_ops:dashboard")
        counts = retention.purgeable_counts()
    except ImproperlyConfigured as exc:
        # A retention its app refuses: nothing was deleted.
        messages.error(request, str(exc))
        return redirect("once_ops:dashboard")
    context = {
        **admin.site.each_context(request),
        "title": _("Purge records past their retention?"),
        "counts": counts,
    }
    return TemplateResponse(request, "admin/idempotency/purge_confirm.html", context)


def _purge(request) -> None:
    counts = retention.purge()
    total = sum(counts.values())
    summary = ", ".join(f"{kind}: {count}" for kind, count in counts.items())
    LogEntry.objects.create(
        user_id=request.user.pk,
        action_flag=CHANGE,
        object_repr="retention purge",
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
