"""Queries on idempotency records, named by intent."""

from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.db import connections, models

from .shared.inserts import insert_or_update, instance_from_row, row_insert

if TYPE_CHECKING:  # the models import these querysets
    from .models import IdempotencyRecord  # noqa: F401 (named in QuerySet[...])


# What the claim reads of an existing record to decide without loading it again.
_RECORD_FIELDS = (
    "id",
    "scope",
    "operation",
    "key",
    "request_hash",
    "state",
    "status_code",
    "response_body",
    "response_headers",
    "attempts",
    "locked_until",
    "expires_at",
)
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
    ):
        """Insert a pending record unless the key exists.

        Return ``(id, None)`` when this call inserted it, ``(None, record)``
        with the existing record as last committed (not locked), or
        ``(None, None)`` when a concurrent insert committed while this one
        waited (the row is newer than the statement's snapshot).
        """
        connection = connections[self.db]
        insert = row_insert(
            self,
            {
                "scope": scope,
                "operation": operation,
                "key": key,
                "request_hash": request_hash,
                "state": self.model.State.PENDING,
                "attempts": 1,
                "locked_until": locked_until,
                "created_at": now,
                "expires_at": expires_at,
            },
        )
        if connection.vendor == "postgresql":
            return self._claim_postgresql(connection, insert, lock_timeout_ms)
        with connection.cursor() as cursor:
            cursor.execute(
                f"{insert.sql} ON CONFLICT DO NOTHING RETURNING {insert.pk_column}",
                insert.params,
            )
            row = cursor.fetchone()
        if row:
            return row[0], None
        return None, self.for_key(scope, operation, key).first()

    def _claim_postgresql(self, connection, insert, lock_timeout_ms):
        # One round trip for the common cases. ``guard`` bounds how long the
        # INSERT may wait on a concurrent insert of the same key (the insert
        # selects from it, so the bound is set first); the outer SELECT puts
        # the previous timeout back once a row comes back, as
        # bounded_lock_timeout() does. The second branch reads the existing
        # row from the statement's snapshot, without locking it.
        quote = connection.ops.quote_name
        fields = ", ".join(quote(name) for name in _RECORD_FIELDS)
        nulls = ", ".join(["NULL"] * (len(_RECORD_FIELDS) - 1))
        restore = "set_config('lock_timeout', (SELECT previous FROM guard), true)"
        sql = (
            "WITH guard AS (SELECT current_setting('lock_timeout') AS previous, "
            f"{_BOUND_LOCK_TIMEOUT} AS bounded), "
            f"inserted AS (INSERT INTO {insert.table} ({insert.columns}) "
            f"SELECT {insert.placeholders} FROM guard "
            f"ON CONFLICT DO NOTHING RETURNING {insert.pk_column}) "
            f"SELECT TRUE, {insert.pk_column}, {nulls}, {restore} FROM inserted "
            f"UNION ALL SELECT FALSE, {fields}, {restore} FROM {insert.table} "
            "WHERE scope = %s AND operation = %s AND key = %s"
        )
        scope, operation, key = insert.params[:3]
        params = [f"{lock_timeout_ms}ms", *insert.params, scope, operation, key]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None, None
        if row[0]:
            return row[1], None
        return None, instance_from_row(self, _RECORD_FIELDS, row[1:-1])

    def complete(
        self,
        pk,
        attempt,
        *,
        status_code,
        body,
        headers,
        resource_type,
        resource_id,
        now,
    ) -> bool:
        """Store the answer of the attempt holding the claim; False if fenced out.

        One hand-written UPDATE: it runs on every keyed request, and the ORM's
        update() costs about 170 µs more per call here (make bench, "the
        completion statement"). Values go through the fields as the ORM's do.
        """
        connection = connections[self.db]
        State = self.model.State
        fields = {field.name: field for field in self.model._meta.concrete_fields}
        sql = (
            f"UPDATE {connection.ops.quote_name(self.model._meta.db_table)} "
            "SET state = %s, status_code = %s, response_body = %s, "
            "response_headers = %s, resource_type = %s, resource_id = %s, "
            "locked_until = NULL, completed_at = %s "
            # Fenced: only the attempt holding the claim may complete it.
            "WHERE id = %s AND attempts = %s AND state = %s"
        )
        params = [
            State.COMPLETED,
            status_code,
            fields["response_body"].get_db_prep_save(body, connection),
            fields["response_headers"].get_db_prep_save(headers, connection),
            resource_type,
            resource_id,
            fields["completed_at"].get_db_prep_save(now, connection),
            pk,
            attempt,
            State.PENDING,
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def lock_key(self, scope, operation, key, *, lock_timeout_ms):
        """Lock the record of a key (None if gone), waiting at most the timeout."""
        with bounded_lock_timeout(connections[self.db], lock_timeout_ms):
            return self.select_for_update().for_key(scope, operation, key).first()

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
