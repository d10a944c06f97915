"""INSERT … ON CONFLICT built from a model's ``_meta``.

The ORM has no "insert unless a unique constraint holds the row, and tell me
which happened" in one statement (``bulk_create(ignore_conflicts=True)``
returns no ids). Every dedup decision of the four apps is that statement:
columns from the model's ``_meta``, values through each field's ``pre_save``
and ``get_db_prep_save`` as the ORM's own INSERT does, and the conflict
clause that PostgreSQL and SQLite (3.35+) share. The two hottest paths, the
inbox's claim and the webhook intake, cache their statement per database
instead of building it per call (``make bench`` measures why).
"""

from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import QuerySet


@dataclass(frozen=True)
class RowInsert:
    """One row's INSERT, in parts a caller can compose into a larger statement."""

    table: str
    columns: str
    placeholders: str
    params: list
    pk_column: str

    @property
    def sql(self) -> str:
        return f"INSERT INTO {self.table} ({self.columns}) VALUES ({self.placeholders})"


def row_insert(queryset: QuerySet, values: dict[str, Any]) -> RowInsert:
    """The INSERT of one row of ``queryset.model`` with ``values`` and defaults.

    Django builds the instance, so field defaults and ``auto_now_add`` apply;
    an auto primary key is left to the database.
    """
    model = queryset.model
    opts = model._meta
    connection = connections[queryset.db]
    instance = model(**values)
    fields = [
        field
        for field in opts.concrete_fields
        if not (field.primary_key and field.name not in values and field.db_returning)
    ]
    quote = connection.ops.quote_name
    return RowInsert(
        table=quote(opts.db_table),
        columns=", ".join(quote(field.column) for field in fields),
        placeholders=", ".join(["%s"] * len(fields)),
        params=[
            field.get_db_prep_save(field.pre_save(instance, True), connection)
            for field in fields
        ],
        pk_column=quote(opts.pk.column),
    )


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
    insert = row_insert(queryset, values)
    connection = connections[queryset.db]
    fields = queryset.model._meta
    target = ", ".join(
        connection.ops.quote_name(fields.get_field(name).column) for name in unique
    )
    sql = f"{insert.sql} ON CONFLICT ({target}) DO UPDATE SET {update}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*insert.params, *params])
