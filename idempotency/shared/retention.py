"""Retention: delete what has outlived its purpose, in small batches.

Each app declares its *kinds* on its AppConfig (``retention_kinds``, see
``contributions``): a name and functions returning the rows safe to delete
at a given time, re-applied to every batch. This module never imports the
other apps, so dependencies keep pointing one way.
"""

import logging
import math
from collections.abc import Iterator

from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError, connections, router, transaction
from django.db.models import Model, Subquery

from . import clock, contributions, isolation
from .signals import Reporter, purged

DEFAULT_BATCH_SIZE = 1000
# Seconds of rest after each full batch. Flat out, a purge of a million keys
# took both cores of a small database host and tripled a writer's p99 insert;
# with this rest it stayed within 1.6x at half the speed, about 100,000 rows
# a second (docs/benchmarks.md, "Retention").
DEFAULT_PAUSE = 0.005
# Bounds that keep a typo from holding locks on a million rows in one
# transaction, or from sleeping for ever between two batches.
MAX_BATCH_SIZE = 100_000
MAX_PAUSE = 60.0
# Times in a row a batch may meet a row changed after its snapshot (REPEATABLE
# READ and SERIALIZABLE refuse it, idempotency.shared.isolation) before the
# purge gives up: each retry is a new snapshot that sees the change.
RACED_BATCHES = 5
_report = Reporter("idempotency")


def purgeable_counts(now=None, *, cap=None) -> dict[str, int]:
    """Count the rows each kind would delete; past ``cap``, any number above it."""
    now = now or clock.now()
    counts = {}
    for name, purgeables in contributions.retention_kinds().items():
        # One row past the cap, so a caller can tell "more than the cap".
        counts[name] = sum(
            rows[: cap + 1].count() if cap else rows.count()
            for rows in (purgeable(now) for purgeable in purgeables)
        )
    return counts


def purgeable_rows(model, now=None):
    """The rows of ``model`` a purge would delete now, on no database in
    particular (a list filters its own reads by them); None when no kind
    deletes any. A kind whose retention is refused deletes none: the purge
    refuses to run it."""
    now = now or clock.now()
    found = None
    for purgeables in contributions.retention_kinds().values():
        for purgeable in purgeables:
            try:
                rows = purgeable(now)
            except ImproperlyConfigured:
                continue
            if rows.model is model:
                found = rows if found is None else found | rows
    return found


def purgeable_counts_by_model(
    now=None, *, cap=None
) -> list[tuple[str, type[Model], int]]:
    """``purgeable_counts()`` per model of each kind (the webhooks kind
    purges receipts and rejection counts): (kind, model, count), each count
    one past ``cap`` at most, so that each can link to its own list."""
    now = now or clock.now()
    counts: dict[tuple[str, type[Model]], int] = {}
    for name, purgeables in contributions.retention_kinds().items():
        for rows in (purgeable(now) for purgeable in purgeables):
            found = rows[: cap + 1].count() if cap else rows.count()
            key = (name, rows.model)
            counts[key] = counts.get(key, 0) + found
    return [(name, model, count) for (name, model), count in counts.items()]


def purge(
    *,
    only=None,
    batch_size=DEFAULT_BATCH_SIZE,
    pause: float = DEFAULT_PAUSE,
    dry_run=False,
    now=None,
    progress=None,
    using: str | None = None,
) -> dict[str, int]:
    """Delete the purgeable rows of the kinds in ``only`` (every registered kind
    when it is None); return counts per kind.

    Each batch is its own short transaction and re-checks the kind's filter,
    so a row that changed since it was selected (a receipt reprocessed, a key
    re-claimed) is left alone, and writers are never blocked for more than
    one batch. ``pause``: seconds to rest after each full batch, so that on a
    busy database the writers get its CPU and disk back between batches (0:
    flat out, twice as fast). ``progress(kind, deleted_so_far)`` is called
    after each batch. ``using``: the database to purge (one whose rows an
    app wrote there with ``using=``); by default, each model's, where the
    router sends its writes.
    A kind whose retention its app refuses raises ImproperlyConfigured first.
    """
    # Types too: the task's kwargs come as a beat entry gives them. A batch
    # of 1.5 ran LIMIT 1 and stopped after one batch, as 1 < 1.5 looked last.
    if not (_is_number(batch_size, int) and 1 <= batch_size <= MAX_BATCH_SIZE):
        raise ValueError(
            f"batch_size must be a whole number of rows, at least 1 and at "
            f"most {MAX_BATCH_SIZE:,}, not {batch_size!r}"
        )
    if not (
        _is_number(pause, int | float)
        and math.isfinite(pause)
        and 0 <= pause <= MAX_PAUSE
    ):
        raise ValueError(
            f"pause must be 0 or more seconds, at most {MAX_PAUSE:g}, not {pause!r}"
        )
    kinds = contributions.retention_kinds()
    if isinstance(only, str):
        # As the command takes them (a beat entry's kwargs): "a, b".
        only = [kind.strip() for kind in only.split(",") if kind.strip()]
    if only is not None and not (
        isinstance(only, list | tuple | set | frozenset)
        and all(isinstance(kind, str) for kind in only)
    ):
        raise ValueError(
            f'only must be kind names, a list or "a, b" '
            f"({', '.join(kinds)}), not {only!r}"
        )
    if only is not None and not only:
        # An empty choice (``--only ""``) is a mistake, never "every kind".
        raise ValueError(f"Choose at least one kind: {', '.join(kinds)}.")
    unknown = set(only or ()) - set(kinds)
    if unknown:
        raise ValueError(
            f"Unknown retention kind(s): {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(kinds)}."
        )
    if using is not None and using not in connections:
        raise ValueError(f"Unknown database {using!r}: not in DATABASES.")
    now = now or clock.now()
    chosen = {name: kinds[name] for name in kinds if not only or name in only}
    # Each kind's rows built once before any DELETE: a retention its app
    # refuses (ImproperlyConfigured) stops the purge before it deletes anything.
    for purgeables in chosen.values():
        for purgeable in purgeables:
            _where_deleted(purgeable, now, using)
    if dry_run:
        return {
            name: sum(
                _where_deleted(purgeable, now, using).count()
                for purgeable in purgeables
            )
            for name, purgeables in chosen.items()
        }
    deleted = {}
    for name, purgeables in chosen.items():
        deleted[name] = 0
        on_db: dict[str, int] = {}  # the kind's rows deleted, per database
        try:
            for purgeable in purgeables:
                db = _where_deleted(purgeable, now, using).db
                for count in _purge_rows(
                    name, purgeable, now, using, batch_size, pause, progress
                ):
                    deleted[name] += count
                    on_db[db] = on_db.get(db, 0) + count
        finally:
            # Each batch committed on its own: the rows are gone already,
            # and are reported even when a later batch failed.
            for db, rows in on_db.items():
                if rows:
                    _report_purged(name, rows, db)
    return deleted


def reason(exc: BaseException) -> str:
    """What stopped a purge, in a line: a database error's first (PostgreSQL's
    next ones quote the statement)."""
    return [*str(exc).strip().splitlines(), repr(exc)][0]


def _is_number(value, kind) -> bool:
    # A bool is an int to Python, never a count or seconds to a reader.
    return isinstance(value, kind) and not isinstance(value, bool)


def _report_purged(name, rows, db) -> None:
    """``purged``, at once, or inside a caller's transaction on ``db`` (where
    the batches did not commit on their own) once it commits: a rollback
    restores the rows. At once otherwise: a batch that failed may have closed
    the connection, and on_commit() would have to open it again."""
    _report(
        purged,
        logging.INFO,
        "Purged %(rows)s %(kind)s row(s)",
        using=db if connections[db].in_atomic_block else None,
        sender=name,
        kind=name,
        rows=rows,
    )


def _purge_rows(
    name, purgeable, now, using, batch_size, pause, progress
) -> Iterator[int]:
    """Delete the rows in batches; yield each batch's count once it committed."""
    deleted = 0
    while True:
        rows = _where_deleted(purgeable, now, using)
        # One DELETE per batch, its ids picked by a subquery that locks only
        # this batch and skips rows a writer holds right now; no id list makes
        # a round trip through Python.
        batch = (
            rows.order_by()
            .select_for_update(skip_locked=True)
            .values("pk")[:batch_size]
        )
        count = _delete_batch(rows.filter(pk__in=Subquery(batch)), rows.db)
        yield count
        deleted += count
        if progress and count:
            progress(name, deleted)
        if count < batch_size:
            return
        if pause:
            clock.sleep(pause)


def _where_deleted(purgeable, now, using):
    """A kind's rows on the database the purge deletes them from: ``using``,
    else where their model's writes go, never a replica behind it (a dry run
    counts there too, or it would count what the purge would not find)."""
    # ``using`` only when given: a kind's function may take ``now`` alone.
    rows = purgeable(now, using=using) if using else purgeable(now)
    return rows.using(using or router.db_for_write(rows.model))


def _delete_batch(rows, using) -> int:
    """Delete ``rows`` in a transaction of their own; taken again when a row
    changed after the transaction's snapshot (a late retry took an expired
    key over, say): the new snapshot re-checks the kind's filter on it."""
    raced = 0
    while True:
        try:
            with transaction.atomic(using=using):
                # The kind's own rows: the total would count the rows their
                # deletion cascades to too (a unit's steps).
                _total, per_model = rows.all().delete()
                return per_model.get(rows.model._meta.label, 0)
        except OperationalError as exc:
            raced += 1
            if raced == RACED_BATCHES or not isolation.is_serialization_failure(exc):
                raise
