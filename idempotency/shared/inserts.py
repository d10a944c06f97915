"""INSERT … ON CONFLICT built from a model's ``_meta``.

The ORM has no "insert unless a unique constraint holds the row, and tell me
which happened" in one statement (``bulk_create(ignore_conflicts=True)``
returns no ids). Every dedup decision of the four apps is that statement:
columns from the model's ``_meta``, values through each field's
``get_db_prep_save`` as the ORM's own INSERT does, and the conflict clause
that PostgreSQL and SQLite (3.35+) share. Its column part is built here once
per model and database; each app adds its conflict clause.
"""

from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import QuerySet


@dataclass(frozen=True)
class InsertShape:
    """A model's INSERT with its columns fixed, built once per database.

    The hot paths (a keyed request's claim, the inbox's claim, the webhook
    intake) only prepare values per call: compiling the statement again, or
    building a model instance for it, costs more than running it.
    """

    table: str
    columns: str
    placeholders: str
    pk_column: str
    fields: tuple
    # Each field's default as prepared for the database, or _PER_CALL when
    # its default is a callable (a fresh dict, a uuid4, the time) called for
    # every row. A claim leaves seven of its sixteen fields to their default.
    prepared_defaults: tuple

    @property
    def sql(self) -> str:
        return f"INSERT INTO {self.table} ({self.columns}) VALUES ({self.placeholders})"

    def conflict_target(self, connection, names) -> str:
        quote = connection.ops.quote_name
        opts = self.fields[0].model._meta
        return ", ".join(quote(opts.get_field(name).column) for name in names)

    def params(
        self, values: dict[str, Any], connection, *, prepared: frozenset = frozenset()
    ) -> list:
        """Each value through its field as the ORM's INSERT does, but those
        named in ``prepared``, which the caller prepared; a field without a
        value takes its default (no field here computes its value on save:
        ``insert_shape`` refuses those)."""
        params = []
        for field, default in zip(self.fields, self.prepared_defaults, strict=True):
            if field.name in prepared:
                value = values[field.name]
            elif field.name in values:
                value = field.get_db_prep_save(values[field.name], connection)
            elif default is _PER_CALL:
                value = field.get_db_prep_save(field.get_default(), connection)
            else:
                value = default
            params.append(value)
        return params


# A default that is a callable, called for every row.
_PER_CALL = object()


def _prepared_default(field, connection):
    """A constant default prepared once: every keyed request's claim would
    prepare the same seven values again (docs/benchmarks.md, "Idempotency
    keys")."""
    if field.has_default() and callable(field.default):
        return _PER_CALL
    return field.get_db_prep_save(field.get_default(), connection)


_shapes: dict = {}


def insert_shape(
    model, connection, names: tuple[str, ...] | None = None
) -> InsertShape:
    """The INSERT of ``names`` (default: every concrete field but the primary
    key) of ``model`` on ``connection``'s database, built once."""
    cache_key = (model, connection.alias, names)
    shape = _shapes.get(cache_key)
    if shape is None:
        opts = model._meta
        if names is None:
            fields = tuple(f for f in opts.concrete_fields if not f.primary_key)
        else:
            fields = tuple(opts.get_field(name) for name in names)
        for field in fields:
            if getattr(field, "auto_now", False) or getattr(
                field, "auto_now_add", False
            ):
                raise ValueError(
                    f"{opts.label}.{field.name} computes its value on save, which "
                    "a prepared INSERT skips; pass its value instead."
                )
        quote = connection.ops.quote_name
        shape = _shapes[cache_key] = InsertShape(
            table=quote(opts.db_table),
            columns=", ".join(quote(field.column) for field in fields),
            placeholders=", ".join(["%s"] * len(fields)),
            pk_column=quote(opts.pk.column),
            fields=fields,
            prepared_defaults=tuple(
                _prepared_default(field, connection) for field in fields
            ),
        )
    return shape


def insert_or_update(
    queryset: QuerySet,
    values: dict[str, Any],
    *,
    unique: tuple[str, ...],
    update: str,
    params: tuple = (),
) -> None:
    """Insert a row, or when ``unique`` fields conflict apply ``update``.

    ``update`` is the SQL after ``DO UPDATE SET``: assignments that may read
    the existing row through the table's name and the proposed one through
    ``excluded``, then an optional ``WHERE``; ``params`` fill its ``%s``.
    """
    connection = connections[queryset.db]
    insert = insert_shape(queryset.model, connection)
    target = insert.conflict_target(connection, unique)
    sql = f"{insert.sql} ON CONFLICT ({target}) DO UPDATE SET {update}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*insert.params(values, connection), *params])
