"""The physical floor of a keyed request: its own statements, sent by psycopg.

No Django, no DRF: one connection with client-side binding (as Django's
psycopg backend uses by default) sends what a keyed create must make the
database do, so the keys' cost can be set against what the database itself
charges for the same bookkeeping:

* the bare create: the order INSERT, in autocommit;
* atomic: BEGIN, key INSERT, order INSERT, key UPDATE (its answer), COMMIT;
* lease: the key INSERT in autocommit, then BEGIN, order INSERT, key UPDATE,
  COMMIT;
* a replay's read: one indexed SELECT of a key's record;
* the keys' own statements, as the keys send them: the atomic floor with the
  replay read before it and the view's SAVEPOINT and RELEASE around the order,
  the lease floor with the replay read before it. Against these, what a keyed
  request costs beyond them is Django's and the keys' Python.

``DjangoFloor`` sends the same statements through Django's own connection
(``connection.cursor()``, ``transaction.atomic()``): what any Django code
pays for them, before the keys do anything of their own.
"""

import json
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta

import psycopg
from django.conf import settings
from django.db import connection as django_connection
from django.db import transaction
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from project.shop.models import Order

ORDER_INSERT = "autocommit order INSERT (psycopg)"
ATOMIC = "atomic floor (psycopg)"
LEASE = "lease floor (psycopg)"
READ = "indexed SELECT (psycopg)"
KEYS_ATOMIC = "the keys' atomic statements (psycopg)"
KEYS_LEASE = "the keys' lease statements (psycopg)"
KINDS = (ORDER_INSERT, ATOMIC, LEASE, READ, KEYS_ATOMIC, KEYS_LEASE)
DJANGO_ORDER_INSERT = "autocommit order INSERT (Django cursor)"
DJANGO_ATOMIC = "atomic floor (Django cursor)"
DJANGO_LEASE = "lease floor (Django cursor)"
DJANGO_KINDS = (DJANGO_ORDER_INSERT, DJANGO_ATOMIC, DJANGO_LEASE)
# About the size of the order's rendered answer, as the record keeps it.
BODY = json.dumps(
    {"id": 1, "sku": "BOOK-1", "quantity": 1, "status": "pending"}
).encode()
HEADERS = json.dumps({"Content-Type": "application/json"})


def connect(alias="default") -> psycopg.Connection:
    config = settings.DATABASES[alias]
    return psycopg.connect(
        host=config.get("HOST") or "127.0.0.1",
        port=config.get("PORT") or 5432,
        user=config.get("USER") or "postgres",
        dbname=config["NAME"],
        autocommit=True,
        cursor_factory=psycopg.ClientCursor,
    )


class Floor:
    """One psycopg connection sending each kind's statements; ``send(kind)``
    returns the nanoseconds they took."""

    def __init__(self, connection, owner_id):
        self.connection = connection
        self.owner_id = owner_id
        records = IdempotencyRecord._meta.db_table
        self.order_sql = (
            f"INSERT INTO {Order._meta.db_table} (owner_id, sku, quantity, status, "
            "created_at) VALUES (%s, 'BOOK-1', 1, 'pending', %s) RETURNING id"
        )
        self.key_sql = (
            f"INSERT INTO {records} (scope, operation, key, request_hash, state, "
            "response_headers, session_digest, resource_type, resource_id, "
            "attempts, locked_until, created_at, expires_at) VALUES (%s, "
            "'bench.floor', %s, %s, 'pending', '{}', '', '', '', 1, %s, %s, %s) "
            "RETURNING id"
        )
        self.complete_sql = (
            f"UPDATE {records} SET state = 'completed', status_code = 201, "
            "response_body = %s, response_headers = %s, session_digest = '', "
            "resource_type = 'shop.order', resource_id = %s, locked_until = NULL, "
            "completed_at = %s WHERE id = %s AND attempts = 1 AND state = 'pending'"
        )
        self.read_sql = (
            "SELECT id, request_hash, state, status_code, response_body, "
            "response_headers, attempts, locked_until, expires_at, session_digest "
            f"FROM {records} WHERE scope = %s AND operation = 'bench.floor' "
            "AND key = %s"
        )
        self.last_key = None

    def send(self, kind) -> int:
        run = {
            ORDER_INSERT: self._autocommit,
            ATOMIC: self._atomic,
            LEASE: self._lease,
            READ: self._indexed,
            KEYS_ATOMIC: self._keys_atomic,
            KEYS_LEASE: self._keys_lease,
            DJANGO_ORDER_INSERT: self._autocommit,
            DJANGO_ATOMIC: self._atomic,
            DJANGO_LEASE: self._lease,
        }[kind]
        started = time.perf_counter_ns()
        run()
        return time.perf_counter_ns() - started

    def _execute(self, sql, params):
        """The statement's first row, if it returns any."""
        cursor = self.connection.execute(sql, params)
        return cursor.fetchone() if cursor.description else None

    @contextmanager
    def _transaction(self):
        self.connection.execute("BEGIN")
        yield
        self.connection.execute("COMMIT")

    def _order(self):
        return self._execute(self.order_sql, [self.owner_id, timezone.now()])[0]

    def _key(self, locked_until):
        self.last_key = str(uuid.uuid4())
        now = timezone.now()
        return self._execute(
            self.key_sql,
            [
                f"user:{self.owner_id}",
                self.last_key,
                "0" * 64,
                locked_until,
                now,
                now + timedelta(days=1),
            ],
        )[0]

    def _complete(self, record_id, order_id):
        self._execute(
            self.complete_sql,
            [BODY, HEADERS, str(order_id), timezone.now(), record_id],
        )

    def _autocommit(self):
        self._order()

    def _atomic(self):
        with self._transaction():
            record_id = self._key(None)
            self._complete(record_id, self._order())

    def _lease(self):
        record_id = self._key(timezone.now() + timedelta(seconds=30))
        with self._transaction():
            self._complete(record_id, self._order())

    def _indexed(self):
        if self.last_key is None:
            self._atomic()
        self._read(self.last_key)

    def _read(self, key):
        self._execute(self.read_sql, [f"user:{self.owner_id}", key])

    def _keys_atomic(self):
        self._read(str(uuid.uuid4()))  # a first request's read finds nothing
        with self._transaction():
            record_id = self._key(None)
            self._execute("SAVEPOINT view", None)
            order_id = self._order()
            self._complete(record_id, order_id)
            self._execute("RELEASE SAVEPOINT view", None)

    def _keys_lease(self):
        self._read(str(uuid.uuid4()))
        self._lease()


class DjangoFloor(Floor):
    """The same statements through Django's default connection: its cursor
    wrapper and ``transaction.atomic()`` (BEGIN on the first statement)."""

    def __init__(self, owner_id):
        super().__init__(None, owner_id)

    def _execute(self, sql, params):
        with django_connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone() if cursor.description else None

    def _transaction(self):
        return transaction.atomic()
