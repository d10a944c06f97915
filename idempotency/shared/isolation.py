"""Claims under REPEATABLE READ and SERIALIZABLE.

Under READ COMMITTED, a claim that waits on another transaction's row goes on
with that row once it commits. Under the stricter levels PostgreSQL refuses
it instead (SQLSTATE 40001, a serialization failure): the row was written
after the claiming transaction's snapshot was taken. The claim has done
nothing yet, and a new transaction sees that row, so a claim in a
transaction of its own is taken again. One inside a caller's transaction
cannot be: the caller's snapshot stays. ``ClaimRaced``
(``idempotency.shared.exceptions``) carries the first case to where the
transaction is opened.
"""

from django.db import OperationalError


def is_serialization_failure(exc: BaseException) -> bool:
    return (
        isinstance(exc, OperationalError)
        and getattr(exc.__cause__, "sqlstate", None) == "40001"
    )
