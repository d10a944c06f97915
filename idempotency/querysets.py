"""Queries on idempotency records, named by intent."""

import json

from django.db import connections, models

_INSERT_COLUMNS = (
    "scope, operation, key, request_hash, locked_until, created_at, expires_at, "
    "state, response_headers, resource_type, resource_id, attempts"
)
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


class IdempotencyRecordQuerySet(models.QuerySet):
    def for_key(self, scope, operation, key):
        return self.filter(scope=scope, operation=operation, key=key)

    def expired(self, now):
        return self.filter(expires_at__lte=now)

    def purgeable(self, now):
        """Expired records, but never a pending claim whose lease still runs."""
        live_lease = models.Q(state="pending", locked_until__gt=now)
        return self.expired(now).exclude(live_lease)

    def stuck(self, now):
        """Pending claims whose lease ran out: their worker died or hangs."""
        return self.filter(state="pending", locked_until__lt=now)

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
        lock_timeout_ms=None,
    ):
        """Insert a pending record unless the key exists.

        Return ``(id, None)`` when this call inserted it, ``(None, record)``
        with the existing record as last committed (not locked), or
        ``(None, None)`` when a concurrent insert committed while this one
        waited (the row is newer than the statement's snapshot).
        """
        connection = connections[self.db]
        values = [scope, operation, key, request_hash]
        values += map(
            connection.ops.adapt_datetimefield_value, (locked_until, now, expires_at)
        )
        if connection.vendor == "postgresql":
            return self._claim_postgresql(connection, values, lock_timeout_ms)
        sql = (
            f"INSERT INTO {self._table(connection)} ({_INSERT_COLUMNS}) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending', '{}', '', '', 1) "
            "ON CONFLICT (scope, operation, key) DO NOTHING RETURNING id"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, values)
            row = cursor.fetchone()
        if row:
            return row[0], None
        return None, self.for_key(scope, operation, key).first()

    def _claim_postgresql(self, connection, values, lock_timeout_ms):
        # One round trip for the common cases. ``guard`` bounds how long the
        # INSERT may wait on a concurrent insert of the same key; the outer
        # SELECT restores the previous timeout once a row comes back, so the
        # view's own lock waits keep the default. The second branch reads the
        # existing row from the statement's snapshot, without locking it.
        table = self._table(connection)
        fields = ", ".join(_RECORD_FIELDS)
        restore = "set_config('lock_timeout', (SELECT previous FROM guard), true)"
        sql = (
            "WITH guard AS (SELECT current_setting('lock_timeout') AS previous, "
            "set_config('lock_timeout', %s, true) AS bounded), "
            f"inserted AS (INSERT INTO {table} ({_INSERT_COLUMNS}) "
            "SELECT %s, %s, %s, %s, %s::timestamptz, %s::timestamptz, "
            "%s::timestamptz, 'pending', '{}'::jsonb, '', '', 1 FROM guard "
            "ON CONFLICT (scope, operation, key) DO NOTHING RETURNING id) "
            f"SELECT TRUE, id, {', '.join(['NULL'] * (len(_RECORD_FIELDS) - 1))}, "
            f"{restore} FROM inserted "
            f"UNION ALL SELECT FALSE, {fields}, {restore} FROM {table} "
            "WHERE scope = %s AND operation = %s AND key = %s"
        )
        params = [f"{lock_timeout_ms or 0}ms", *values, *values[:3]]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None, None
        if row[0]:
            return row[1], None
        record = self.model(**dict(zip(_RECORD_FIELDS, row[1:-1], strict=True)))
        if isinstance(record.response_headers, str):
            record.response_headers = json.loads(record.response_headers)
        record._state.adding, record._state.db = False, self.db
        return None, record

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

        Raw SQL: this runs on every keyed request and the ORM's update
        compiler costs several times the round trip.
        """
        connection = connections[self.db]
        json_param = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
        sql = (
            f"UPDATE {self._table(connection)} SET state = 'completed', "
            f"status_code = %s, response_body = %s, response_headers = {json_param}, "
            "resource_type = %s, resource_id = %s, locked_until = NULL, "
            "completed_at = %s WHERE id = %s AND attempts = %s AND state = 'pending'"
        )
        params = [
            status_code,
            body,
            json.dumps(headers),
            resource_type,
            resource_id,
            connection.ops.adapt_datetimefield_value(now),
            pk,
            attempt,
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def lock_key(self, scope, operation, key, *, lock_timeout_ms):
        """Lock the record of a key (None if gone), waiting at most the timeout."""
        connection = connections[self.db]
        bounded = connection.vendor == "postgresql"
        if bounded:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('lock_timeout', %s, true)",
                    [f"{lock_timeout_ms}ms"],
                )
        record = self.select_for_update().for_key(scope, operation, key).first()
        if bounded:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        return record

    def _table(self, connection):
        return connection.ops.quote_name(self.model._meta.db_table)

    def upsert_failed(self, *, scope, operation, key, request_hash, now, expires_at):
        """Record a failed attempt after its transaction rolled back.

        The rollback may have removed the row (first attempt) or restored it
        (a retry), so insert-or-increment; never touch a completed record.
        """
        connection = connections[self.db]
        table = self._table(connection)
        adapt = connection.ops.adapt_datetimefield_value
        sql = (
            f"INSERT INTO {table} (scope, operation, key, request_hash, created_at, "
            "expires_at, state, response_headers, resource_type, resource_id, "
            "attempts) VALUES (%s, %s, %s, %s, %s, %s, 'failed', '{}', '', '', 1) "
            "ON CONFLICT (scope, operation, key) DO UPDATE SET state = 'failed', "
            f"attempts = {table}.attempts + 1, locked_until = NULL, "
            "request_hash = excluded.request_hash, expires_at = excluded.expires_at "
            f"WHERE {table}.state <> 'completed'"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                sql,
                [scope, operation, key, request_hash, adapt(now), adapt(expires_at)],
            )
