"""The dashboard at /admin/ops/ and the purge behind its confirmation page."""

from collections import Counter
from contextlib import suppress

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.views.main import ORDER_VAR
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import DatabaseError, transaction
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import (
    NoReverseMatch,
    Resolver404,
    get_script_prefix,
    resolve,
    reverse,
)
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..shared import clock, contributions, retention
from .chart import hourly_chart
from .panels import COUNT_CAP, Figure, capped, changelist_url


def dashboard(request):
    if not request.user.has_perm("idempotency.view_opsdashboard"):
        raise PermissionDenied
    now = clock.now()
    try:
        by_model = retention.purgeable_counts_by_model(now, cap=COUNT_CAP)
    except ImproperlyConfigured as exc:
        # A retention that would break a guarantee: say so instead of counting.
        messages.error(request, str(exc))
        by_model = []
    awaiting: Counter[str] = Counter()
    for kind, _model, count in by_model:
        awaiting[kind] += count
    lists = Counter(kind for kind, _model, _count in by_model)
    # Each links to its rows in their list, as every figure does: one per
    # list where a kind purges the rows of several.
    purge_figures = [
        Figure(
            f"{kind} · {model._meta.verbose_name_plural}" if lists[kind] > 1 else kind,
            capped(count, COUNT_CAP),
            _past_retention_url(model),
        )
        for kind, model, count in by_model
    ]
    panels = [build(now) for build in contributions.console_panels()]
    for figure in [*(f for panel in panels for f in panel.figures), *purge_figures]:
        if figure.url:
            figure.url = link_for(request, figure)
    context = {
        **admin.site.each_context(request),
        "title": _("Operations"),
        "panels": panels,
        "awaiting_purge": [
            {"kind": kind, "count": capped(count, COUNT_CAP)}
            for kind, count in awaiting.items()
        ],
        "purge_figures": purge_figures,
        "chart": hourly_chart(now, contributions.console_series()),
        "can_purge": request.user.has_perm("idempotency.purge_records"),
        "count_cap": COUNT_CAP,
        "now": now,
    }
    return TemplateResponse(request, "admin/idempotency/ops.html", context)


def _past_retention_url(model) -> str:
    try:
        return changelist_url(model, retention="past")
    except NoReverseMatch:
        return ""  # a model the admin does not list


def link_for(request, figure) -> str:
    """The figure's link for this viewer: none where they may not open it,
    and its list sorted as the figure asks."""
    try:
        model_admin = _model_admin(figure.url)
    except Resolver404:
        return ""
    if model_admin is None:
        return figure.url
    if not model_admin.has_view_or_change_permission(request):
        return ""
    if figure.ordering:
        return sorted_url(request, model_admin, figure.url, figure.ordering)
    return figure.url


def sorted_url(request, model_admin, url: str, ordering: str) -> str:
    """``url``, a list of ``model_admin``'s, sorted on the column ``ordering``
    names as this viewer's list numbers its columns (?o=)."""
    columns = list(model_admin.get_list_display(request))
    if model_admin.get_actions(request):
        columns.insert(0, "action_checkbox")  # as the admin's changelist does
    descending, name = ordering.startswith("-"), ordering.lstrip("-")
    if name not in columns:
        return url
    position = f"{'-' if descending else ''}{columns.index(name)}"
    return f"{url}{'&' if '?' in url else '?'}{urlencode({ORDER_VAR: position})}"


def _model_admin(url: str):
    """The ModelAdmin serving ``url``, or None (another view); raises
    Resolver404 where nothing does."""
    path = url.split("?", 1)[0]
    # reverse() wrote the site's prefix (SCRIPT_NAME) in; resolve() wants it out.
    prefix = get_script_prefix()
    if path.startswith(prefix):
        path = "/" + path[len(prefix) :]
    # The admin sets ``model_admin`` on the views of each ModelAdmin it serves.
    return getattr(resolve(path).func, "model_admin", None)


# Each batch commits on its own: ATOMIC_REQUESTS would hold every batch's row
# locks, and the rests between them, until the whole purge ends.
@transaction.non_atomic_requests
def purge(request):
    """Confirm, then purge every kind past its retention, in batches."""
    if not request.user.has_perm("idempotency.purge_records"):
        raise PermissionDenied
    # Back to the dashboard, or to the admin's index for whoever may purge
    # but not view the dashboard (a 403, which shows no message).
    dashboard = request.user.has_perm("idempotency.view_opsdashboard")
    back = reverse("once_ops:dashboard" if dashboard else "admin:index")
    try:
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            _purge(request)
            return redirect(back)
        counts = retention.purgeable_counts()
    except ImproperlyConfigured as exc:
        # A retention its app refuses: nothing was deleted.
        messages.error(request, str(exc))
        return redirect(back)
    context = {
        **admin.site.each_context(request),
        "title": _("Purge records past their retention?"),
        "counts": counts,
        "dashboard": dashboard,
        "back": back,
    }
    return TemplateResponse(request, "admin/idempotency/purge_confirm.html", context)


def _purge(request) -> None:
    deleted: dict[str, int] = {}

    def progress(kind, so_far):
        deleted[kind] = so_far

    try:
        counts = retention.purge(progress=progress)
    except DatabaseError as exc:
        # Each batch committed on its own: what went before the failure (a
        # table not migrated, a lost connection) is gone, and is said.
        if deleted:
            # Unless the connection is what failed.
            with suppress(DatabaseError):
                _log_purge(request, deleted)
        messages.error(
            request,
            _(
                "The purge stopped: %(reason)s. Deleted before it stopped: "
                "%(summary)s. Run it again once that is fixed."
            )
            % {
                "reason": retention.reason(exc),
                "summary": _summary(deleted) or _("nothing"),
            },
        )
        return
    _log_purge(request, counts)
    total = sum(counts.values())
    messages.success(
        request,
        ngettext(
            "Purged %(count)d record past its retention (%(summary)s).",
            "Purged %(count)d records past their retention (%(summary)s).",
            total,
        )
        % {"count": total, "summary": _summary(counts)},
    )


def _log_purge(request, counts) -> None:
    LogEntry.objects.create(
        user_id=request.user.pk,
        action_flag=CHANGE,
        object_repr="retention purge",
        change_message=f"Purged records past retention ({_summary(counts)}).",
    )


def _summary(counts) -> str:
    return ", ".join(f"{kind}: {count}" for kind, count in counts.items())
