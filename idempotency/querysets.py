"""Queries on idempotency records, named by intent."""

import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from django.db import connections, models

from .exceptions import IdempotencyConfigurationError
from .shared.inserts import InsertShape, insert_or_update, insert_shape

if TYPE_CHECKING:  # the models import these querysets
    from .models import IdempotencyRecord  # noqa: F401 (named in QuerySet[...])


class KeyRow(NamedTuple):
    """A key's record as the claim decides on it: a row, not a model instance.

    Every retry reads one; building a model instance for it cost more than
    the statement that fetched it.
    """

    pk: int
    request_hash: str
    state: str
    status_code: int | None
    response_body: bytes | None
    response_headers: dict
    attempts: int
    locked_until: datetime | None
    expires_at: datetime
    session_digest: str


# The record's fields a KeyRow holds, in its order.
_ROW_FIELDS = ("id", *KeyRow._fields[1:])
# Transaction-local (true): a rollback puts the previous timeout back by itself.
_BOUND_LOCK_TIMEOUT = "set_config('lock_timeout', %s, true)"


@contextmanager
def bounded_lock_timeout(connection, milliseconds: int):
    """Wait at most ``milliseconds`` for a row lock inside the block (PostgreSQL).

    The previous timeout is restored after the block, so the view's own lock
    waits keep the project's setting. A block that raises needs no restore:
    its transaction rolls back, and the local setting with it.
    """
    if connection.vendor != "postgresql":
        yield  # SQLite waits on its busy timeout instead
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT current_setting('lock_timeout'), {_BOUND_LOCK_TIMEOUT}",
            [f"{milliseconds}ms"],
        )
        previous = cursor.fetchone()[0]
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_BOUND_LOCK_TIMEOUT}", [previous])


@dataclass(frozen=True)
class _Statements:
    """The statements every keyed request runs, written once per backend.

    Each request only fills in the values; the ORM would compile the same
    SQL again for every request. What that buys, against the same statements
    through the ORM (``bench.keys_orm``): docs/benchmarks.md, "The record's
    statements: hand-written vs the ORM".
    """

    # The pending record's INSERT; its values are prepared per request.
    insert: InsertShape
    # PostgreSQL: insert the key unless it exists, waiting a bounded time.
    claim: str
    # Other backends: insert the key unless it exists.
    insert_or_nothing: str
    read: str
    lock: str
    complete: str
    # The completion's response_body, response_headers and completed_at.
    completion_fields: tuple


def _build_statements(model, connection) -> _Statements:
    opts = model._meta
    quote = connection.ops.quote_name
    insert = insert_shape(model, connection)
    table, pk = insert.table, insert.pk_column
    selected = ", ".join(quote(opts.get_field(name).column) for name in _ROW_FIELDS)
    by_key = f"WHERE {quote('scope')} = %s AND {quote('operation')} = %s AND " + (
        f"{quote('key')} = %s"
    )
    read = f"SELECT {selected} FROM {table} {by_key}"
    # ``guard`` bounds how long the INSERT may wait on a concurrent insert of
    # the same key (the insert selects from it, so the bound is set first).
    # The one row answered puts the previous timeout back, on a new key and a
    # taken one alike, as bounded_lock_timeout() does; joined to ``inserted``,
    # it cannot be built before the insert (and its wait) is done. Reading an
    # existing key's record in the same statement made every claim slower
    # (docs/benchmarks.md, "The claim statement").
    claim = (
        "WITH guard AS (SELECT current_setting('lock_timeout') AS previous, "
        f"{_BOUND_LOCK_TIMEOUT} AS bounded), "
        f"inserted AS (INSERT INTO {table} ({insert.columns}) "
        f"SELECT {insert.placeholders} FROM guard "
        f"ON CONFLICT DO NOTHING RETURNING {pk}) "
        f"SELECT inserted.{pk}, set_config('lock_timeout', guard.previous, true) "
        "FROM guard LEFT JOIN inserted ON TRUE"
    )
    complete = (
        f"UPDATE {table} SET {quote('state')} = %s, {quote('status_code')} = %s, "
        f"{quote('response_body')} = %s, {quote('response_headers')} = %s, "
        f"{quote('session_digest')} = %s, "
        f"{quote('resource_type')} = %s, {quote('resource_id')} = %s, "
        f"{quote('locked_until')} = NULL, {quote('completed_at')} = %s "
        # Fenced: only the attempt holding the claim may complete it.
        f"WHERE {pk} = %s AND {quote('attempts')} = %s AND {quote('state')} = %s"
    )
    lock = f"{read} FOR UPDATE" if connection.features.has_select_for_update else read
    return _Statements(
        insert=insert,
        claim=claim,
        insert_or_nothing=f"{insert.sql} ON CONFLICT DO NOTHING RETURNING {pk}",
        read=read,
        lock=lock,
        complete=complete,
        completion_fields=tuple(
            opts.get_field(name)
            for name in ("response_body", "response_headers", "completed_at")
        ),
    )


# Per connection (one per thread and alias): the statements and the
# converters that turn a read row's values into what the fields hold. Kept
# for the figure in docs/benchmarks.md, "The record's statements:
# hand-written vs the ORM".
_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _prepare(model, connection) -> tuple[_Statements, tuple]:
    prepared = _prepared.get(connection)
    if prepared is None:
        converters = []
        for name in _ROW_FIELDS:
            field = model._meta.get_field(name)
            column = field.get_col(model._meta.db_table)
            converters.append(
                (
                    column,
                    connection.ops.get_db_converters(column)
                    + field.get_db_converters(connection),
                )
            )
        prepared = _build_statements(model, connection), tuple(converters)
        _prepared[connection] = prepared
    return prepared


def _key_row(connection, converters, values) -> KeyRow:
    """A KeyRow from raw column values, converted as the ORM would."""
    converted = []
    for value, (column, field_converters) in zip(values, converters, strict=True):
        for convert in field_converters:
            value = convert(value, column, connection)
        converted.append(value)
    return KeyRow._make(converted)


class IdempotencyRecordQuerySet(models.QuerySet["IdempotencyRecord"]):
    def for_key(self, scope, operation, key):
        return self.filter(scope=scope, operation=operation, key=key)

    def expired(self, now):
        return self.filter(expires_at__lte=now)

    def purgeable(self, now):
        """Expired records, but never a pending claim whose lease still runs."""
        live_lease = models.Q(state=self.model.State.PENDING, locked_until__gt=now)
        return self.expired(now).exclude(live_lease)

    def stuck(self, now):
        """Pending claims whose lease ran out: their worker died or hangs."""
        return self.filter(state=self.model.State.PENDING, locked_until__lt=now)

    def claim(
        self,
        *,
        scope,
        operation,
        key,
        request_hash,
        now,
        expires_at,
        locked_until=None,
        lock_timeout_ms=0,
    ) -> int | None:
        """Insert a pending record unless the key exists: its id, or None
        when the key was there (the caller locks and reads its record)."""
        connection = connections[self.db]
        statements = _prepare(self.model, connection)[0]
        # state and attempts take the model's defaults (pending, the first
        # attempt), which the INSERT's shape prepared once: every keyed
        # request's claim passes here.
        values = {
            "scope": scope,
            "operation": operation,
            "key": key,
            "request_hash": request_hash,
            "locked_until": locked_until,
            "created_at": now,
            "expires_at": expires_at,
        }
        params = statements.insert.params(values, connection)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(statements.claim, [f"{lock_timeout_ms}ms", *params])
            else:
                cursor.execute(statements.insert_or_nothing, params)
            row = cursor.fetchone()
        return row[0] if row else None

    def complete(
        self,
        pk,
        attempt,
        *,
        status_code,
        body,
        headers,
        session_digest,
        resource_type,
        resource_id,
        now,
    ) -> bool:
        """Store the answer of the attempt holding the claim; False if fenced out.

        One hand-written UPDATE: it runs on every keyed request (its cost
        against the ORM's update(): docs/benchmarks.md, "The record's
        statements: hand-written vs the ORM"). Values go through the fields
        as the ORM's do.
        """
        connection = connections[self.db]
        statements, _converters = _prepare(self.model, connection)
        State = self.model.State
        body_field, headers_field, completed_field = statements.completion_fields
        params = [
            State.COMPLETED,
            status_code,
            body_field.get_db_prep_save(body, connection),
            headers_field.get_db_prep_save(headers, connection),
            session_digest,
            resource_type,
            resource_id,
            completed_field.get_db_prep_save(now, connection),
            pk,
            attempt,
            State.PENDING,
        ]
        with connection.cursor() as cursor:
            cursor.execute(statements.complete, params)
            return cursor.rowcount == 1

    def read_key(self, scope, operation, key) -> KeyRow | None:
        """The record of a key as last committed (None if absent), unlocked:
        one indexed SELECT, in no transaction of its own."""
        connection = connections[self.db]
        statements, converters = _prepare(self.model, connection)
        with connection.cursor() as cursor:
            cursor.execute(statements.read, [scope, operation, key])
            row = cursor.fetchone()
        return row and _key_row(connection, converters, row)

    def lock_key(self, scope, operation, key, *, lock_timeout_ms) -> KeyRow | None:
        """Lock the record of a key (None if gone), waiting at most the timeout."""
        connection = connections[self.db]
        statements, converters = _prepare(self.model, connection)
        with (
            bounded_lock_timeout(connection, lock_timeout_ms),
            connection.cursor() as cursor,
        ):
            cursor.execute(statements.lock, [scope, operation, key])
            row = cursor.fetchone()
        return row and _key_row(connection, converters, row)

    def count_live_serialized(
        self, scope, operation, now, *, limit, lock_timeout_ms
    ) -> int:
        """Count a scope's live records of one operation, up to ``limit``.

        Counts wait for each other: on PostgreSQL a transaction-level advisory
        lock per (scope, operation), held until the caller's transaction ends
        and waited for at most the timeout; on SQLite the caller's claim has
        taken the database's only write lock already. A count then sees every
        row a concurrent claim committed before it.
        """
        connection = connections[self.db]
        if connection.vendor == "postgresql":
            with (
                bounded_lock_timeout(connection, lock_timeout_ms),
                connection.cursor() as cursor,
            ):
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0)), "
                    "current_setting('transaction_isolation')",
                    [f"idempotency\x1f{scope}\x1f{operation}"],
                )
                isolation = cursor.fetchone()[1]
            if isolation == "repeatable read":
                # Its snapshot predates the lock: the count would miss the
                # claims committed while it waited, and let them all in.
                # (SERIALIZABLE fails one of them instead.)
                raise IdempotencyConfigurationError(
                    "The anonymous key cap cannot be counted under REPEATABLE "
                    f"READ: run {self.model._meta.label}'s database at READ "
                    "COMMITTED (or SERIALIZABLE), or do not allow anonymous keys."
                )
        live = self.filter(scope=scope, operation=operation, expires_at__gt=now)
        return live[:limit].count()

    def upsert_failed(self, *, scope, operation, key, request_hash, now, expires_at):
        """Record a failed attempt after its transaction rolled back.

        The rollback may have removed the row (first attempt) or restored it
        (a retry), so insert-or-increment; never touch a completed record.
        """
        State = self.model.State
        table = connections[self.db].ops.quote_name(self.model._meta.db_table)
        insert_or_update(
            self,
            {
                "scope": scope,
                "operation": operation,
                "key": key,
                "request_hash": request_hash,
                "state": State.FAILED,
                "attempts": 1,
                "created_at": now,
                "expires_at": expires_at,
            },
            unique=("scope", "operation", "key"),
            update=(
                f"state = excluded.state, attempts = {table}.attempts + 1, "
                "locked_until = NULL, request_hash = excluded.request_hash, "
                f"expires_at = excluded.expires_at WHERE {table}.state <> %s"
            ),
            params=(State.COMPLETED,),
        )
