"""The keyed request's record statements written with the ORM, for comparison.

``bench.idempotency`` runs the same requests through this queryset and through
``idempotency.querysets`` (hand-written statements built once per connection),
alternately, and writes what the hand-written ones buy to docs/benchmarks.md.
"""

from django.db import connections

from idempotency.querysets import IdempotencyRecordQuerySet, bounded_lock_timeout


class OrmRecordQuerySet(IdempotencyRecordQuerySet):
    """The same replay read, completion and lock through ``first()``,
    ``update()`` and ``select_for_update()``: the same statements per request.

    The claim stays the hand-written one: the ORM has no INSERT that skips an
    existing key and says which happened, with its wait bounded."""

    def read_key(self, scope, operation, key) -> object:
        """The record of a key as last committed (None if absent), unlocked."""
        return self.for_key(scope, operation, key).first()

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
        """Store the answer of the attempt holding the claim; False if fenced out."""
        State = self.model.State
        # Fenced: only the attempt holding the claim may complete it.
        updated = self.filter(pk=pk, attempts=attempt, state=State.PENDING).update(
            state=State.COMPLETED,
            status_code=status_code,
            response_body=body,
            response_headers=headers,
            session_digest=session_digest,
            resource_type=resource_type,
            resource_id=resource_id,
            locked_until=None,
            completed_at=now,
        )
        return updated == 1

    def lock_key(self, scope, operation, key, *, lock_timeout_ms) -> object:
        """Lock the record of a key (None if gone), waiting at most the timeout."""
        connection = connections[self.db]
        with bounded_lock_timeout(connection, lock_timeout_ms):
            return self.select_for_update().for_key(scope, operation, key).first()
