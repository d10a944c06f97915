"""Retention for units of steps: finished units go, with their step log,
once no owner can bring a retry that would need them.

A unit's owner is the record that lets a retry join it again (a key, an
inbox message id, a webhook receipt). Each app names its kind's owner
retention on its AppConfig (``unit_owners``); UNIT_RETENTION must outlast
every one, or a retry after the purge would run its steps again.
"""

from datetime import timedelta

from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Exists, OuterRef

from .. import contributions
from ..conf import shared_settings
from ..settings import seconds
from .models import UnitRecord

FINISHED = [UnitRecord.State.DONE, UnitRecord.State.COMPENSATED]


def purgeable(now, using=None):
    """Finished units untouched for UNIT_RETENTION; running and compensating
    units stay whatever their age, and so do the units of owners kept
    whatever theirs (``kept_units``). Their step rows go with them (cascade).
    ``using``: the database purged, which the rows are moved to."""
    cutoff = now - checked_retention()
    rows = UnitRecord.objects.filter(state__in=FINISHED, updated_at__lt=cutoff)
    for kept in contributions.kept_units():
        # A subquery: each batch's statement reads the owners as they are
        # then, on its own database (a unit lives with its owner). NOT
        # EXISTS, not NOT IN: PostgreSQL hashes a NOT IN list only while it
        # fits in work_mem, and otherwise scans it again for every unit.
        rows = rows.exclude(Exists(kept().filter(unit=OuterRef("pk"))))
    return rows


def checked_retention() -> timedelta:
    """UNIT_RETENTION, refused while an owner's record outlives it."""
    retention = shared_settings.UNIT_RETENTION
    if why := _short_retention(retention, strict=True):
        raise ImproperlyConfigured(why)
    return retention


def check_retention(app_configs=None, **kwargs):
    try:
        retention = shared_settings.UNIT_RETENTION
    except ImproperlyConfigured:
        return []  # reported by the settings check
    why = _short_retention(retention)
    if not why:
        return []
    return [
        Error(
            why,
            hint="Raise IDEMPOTENCY['UNIT_RETENTION'] above every owner's retention.",
            id="idempotency.E016",
        )
    ]


def _short_retention(retention: timedelta, *, strict=False) -> str | None:
    """Why ``retention`` is too short for an owner, or None. ``strict`` (the
    purge): an owner whose own retention is refused refuses it too, as its
    own purge does: how long it still brings retries is unknown."""
    for kind, owner_retention in contributions.unit_owners().items():
        try:
            owner = owner_retention()
        except ImproperlyConfigured as exc:
            if strict:
                return (
                    f"The {kind} owner's retention is refused, so units are "
                    f"kept until it is set right: {exc}"
                )
            continue  # the owner's own check reports it
        if retention < owner:
            return (
                f"IDEMPOTENCY['UNIT_RETENTION'] ({seconds(retention)}) is shorter "
                f"than the {kind} owner's retention ({seconds(owner)}): a retry "
                "after its unit was purged would run its steps again."
            )
    return None
