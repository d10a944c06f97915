"""What the keys feature decided, as signals (sent after the commit when the
decision is a committed fact). Every one about a request is sent with
``operation``, ``mode`` and ``scope`` keyword arguments, never the raw key:
use ``unit`` (the identity digest) to tell requests apart. The sender is
``IdempotencyRecord``.
"""

import logging

from django.dispatch import Signal

from .exceptions import LeaseLost, PayloadMismatch, RequestInFlight
from .shared.signals import Reporter
from .shared.units import KEYS, Unit

# A request took its key (new, or a failed or lapsed one taken over): attempt.
# Atomic mode: sent when its work and answer commit; lease mode: when the
# claim commits, before the view runs.
key_claimed = Signal()
# A stored answer was sent again: status.
key_replayed = Signal()
# The key was in flight elsewhere and the request got 409: problem.
key_conflict = Signal()
# The key came back with a different request (422): problem.
key_mismatch = Signal()
# The view's work was rolled back: status, reason (one of FAILURES).
key_failed = Signal()
# Any other problem answer instead of the view: the key missing or malformed,
# the anonymous scope's cap reached, an answer not kept or not shared...:
# problem (its type). Sent at once: nothing was claimed.
key_refused = Signal()
# An operator released stuck keys in the console (the client's retry runs):
# count, user, released (each key's operation, scope and unit; never a key).
# The one signal of the keys not about a single request.
keys_released = Signal()


# Sending them, with one log line per decision on the "idempotency" logger.
# Each takes the claim (``request.idempotency``) and the mode it ran in.

_report = Reporter("idempotency", "idempotency.IdempotencyRecord")

# Why a keyed request's work was rolled back (key_failed's ``reason``).
RAISED = "raised"  # the view raised
ERROR_STATUS = "error-status"  # it answered an error STORE_STATUS declines
INVALID = "invalid"  # it failed validation before any mutation
LEASE_LOST = "lease-lost"  # a newer attempt took the key over (lease mode)
FAILURES = (RAISED, ERROR_STATUS, INVALID, LEASE_LOST)


def identity(claim, mode: str = "") -> dict:
    """What names a keyed request in a log line or a signal: never its key
    (``mode`` is "" where the caller cannot tell it)."""
    return {
        "operation": claim.operation,
        "mode": _reported(mode),
        "scope": claim.scope,
        "unit": claim.unit.identity,
    }


def _reported(mode: str) -> str:
    """Steps mode runs on lease mode's claim and is reported as lease: the
    documented values of ``mode`` are atomic and lease."""
    return "lease" if mode == "steps" else mode


def claimed(claim, mode: str, *, using: str) -> None:
    if not _report.heard(key_claimed, logging.DEBUG):
        # Every first request passes here: skip hashing its unit for nobody
        # (docs/benchmarks.md, "Idempotency keys").
        return
    _report(
        key_claimed,
        logging.DEBUG,
        "Key claimed for %(operation)s (attempt %(attempt)s)",
        using=using,
        attempt=claim.attempt,
        **identity(claim, mode),
    )


def replayed(claim, mode: str, response) -> None:
    if not _report.heard(key_replayed, logging.INFO):
        return  # as in claimed()
    _report(
        key_replayed,
        logging.INFO,
        "Replayed the stored answer (%(status)s) for %(operation)s",
        status=response.status_code,
        **identity(claim, mode),
    )


def failed(
    claim, mode: str, *, status: int, reason: str, using: str | None = None
) -> None:
    _report(
        key_failed,
        logging.WARNING if reason in (RAISED, LEASE_LOST) else logging.INFO,
        "Not kept (%(reason)s, status %(status)s): %(operation)s",
        using=using,
        status=status,
        reason=reason,
        **identity(claim, mode),
    )


def refused(request, policy, exc) -> None:
    """A problem answer instead of the view: conflict, mismatch, a lost lease
    (failed) or a refusal of the key itself (refused)."""
    claim = getattr(request, "idempotency", None) or None  # Keyless: None
    if isinstance(exc, LeaseLost):
        failed(claim, policy.mode, status=exc.status, reason=LEASE_LOST)
        return
    if claim is None:  # refused before the scope was known
        fields = {"operation": policy.operation, "mode": _reported(policy.mode)}
        fields.update(scope="", unit="")
    else:
        fields = identity(claim, policy.mode)
    fields["problem"] = exc.type
    message = "Refused (%(problem)s) for %(operation)s"
    if isinstance(exc, RequestInFlight):
        _report(key_conflict, logging.INFO, message, **fields)
    elif isinstance(exc, PayloadMismatch):
        _report(key_mismatch, logging.WARNING, message, **fields)
    else:
        # Anyone can mint keys in the anonymous scope: its cap says someone did.
        level = logging.WARNING if exc.status == 429 else logging.INFO
        _report(key_refused, level, message, **fields)


def released(records, user, *, using: str) -> None:
    """Stuck keys an operator released, after the release commits."""
    _report.operator_action(
        keys_released,
        user,
        records,
        "released %(count)s stuck key(s)",
        using=using,
        released=[
            {
                "operation": record.operation,
                "scope": record.scope,
                "unit": Unit(
                    KEYS, (record.scope, record.operation, record.key)
                ).identity,
            }
            for record in records
        ],
    )
