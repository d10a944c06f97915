"""The claim: take a key, run the view at most once, store or replay its answer.

Two flows share one decision table (``_decide``):

* atomic: claim, view and stored answer commit in one transaction;
* lease: the claim commits first with a lease, then the view's local work and
  the stored answer commit together, fenced on the claim's attempt number;
* steps: the claim commits first with a lease, the view runs in no
  transaction and each of its steps commits on its own (``stepping``), and
  the answer is stored when it returns, fenced on the claim's attempt.
"""

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import Any, NamedTuple

from django.db import DatabaseError, OperationalError, router, transaction

from . import keys, responses, signals, stepping
from .conf import idempotency_settings, key_ttl, outlasting_ttl
from .exceptions import (
    AnonymousKey,
    AnonymousKeysExhausted,
    IdempotencyConfigurationError,
    IdempotencyError,
    Invalid,
    KeyMissing,
    LeaseLost,
    PayloadMismatch,
    RequestInFlight,
)
from .fingerprint import compute as compute_fingerprint
from .models import IdempotencyRecord
from .scopes import ANONYMOUS
from .shared import clock, databases, isolation, problems, storable, tracing, units
from .shared.exceptions import ClaimRaced
from .shared.settings import InvalidSetting, as_timedelta
from .shared.steps import Abandon, CompensationInProgress, StepTakenOver

ATOMIC = "atomic"
LEASE = "lease"
STEPS = "steps"
MODES = (ATOMIC, LEASE, STEPS)
# Safe methods (RFC 9110) change nothing, so a key means nothing on them (as
# at Stripe): a view or action that also serves its form or its result on GET
# answers them unguarded, instead of refusing them without a key.
UNGUARDED_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# How often a lease-mode duplicate re-reads the record while it waits.
POLL_INTERVAL = 0.05
# idempotency.outcome on the server span, beside the problem types of refusals.
EXECUTED = "executed"  # the view ran under the claim
REPLAYED = "replayed"  # the stored answer was sent again
NOT_KEPT = "not-kept"  # the view's answer was not stored (a validation error)
FAILED = "failed"  # the view raised

State = IdempotencyRecord.State
logger = logging.getLogger("idempotency")


@dataclass(frozen=True)
class Policy:
    """How one operation is guarded; built by the mixin or the decorator.

    Its options come checked by ``view_options()``, which runs once, where
    the view is built: the mixin builds a Policy on every request.
    """

    operation: str
    scope: Callable
    required: bool = True
    mode: str = ATOMIC
    # None: the TTL setting.
    ttl: timedelta | None = None
    allow_anonymous: bool = False
    # Field names or dotted paths left out of the fingerprint.
    exclude_fields: tuple[str, ...] = ()


def view_options(
    label: Callable[[str], str],
    *,
    mode,
    ttl,
    exclude_fields,
    required=True,
    allow_anonymous=False,
) -> dict[str, Any]:
    """A view's own options, checked.

    ``label(option)`` names the option as the view spells it. Refused with
    ``IdempotencyConfigurationError``; the TTL's comparison with LEASE + WAIT
    depends on the settings, so ``operation_ttl()`` makes it per request.
    """
    if mode not in MODES:
        raise IdempotencyConfigurationError(
            f"{label('mode')} is {mode!r}; use one of {', '.join(MODES)}."
        )
    for name, value in (("required", required), ("allow_anonymous", allow_anonymous)):
        # None or "false" would read as a choice: keyless requests unguarded,
        # or every anonymous client in one scope.
        if not isinstance(value, bool):
            raise IdempotencyConfigurationError(
                f"{label(name)} is {value!r}; use True or False."
            )
    if mode == STEPS and not required:
        # A keyless request has no unit: its view could run no step (no
        # request.idempotency), and none would resume on a retry.
        raise IdempotencyConfigurationError(
            f"{label('required')} is {required!r}, but a steps-mode view needs "
            "a key: without one its steps have no unit to resume. Require the "
            "key, or use mode 'lease'."
        )
    return {
        "required": required,
        "allow_anonymous": allow_anonymous,
        "mode": mode,
        "ttl": view_ttl(ttl, label("ttl")),
        "exclude_fields": validated_exclude_fields(
            exclude_fields, label("exclude_fields")
        ),
    }


def validated_exclude_fields(value, name: str) -> tuple[str, ...]:
    """Validate the fields a view leaves out of the fingerprint (``name``
    names its setting). A bare string would be read one character at a time,
    leaving out fields nobody meant to."""
    try:
        fields = None if isinstance(value, str | bytes) else tuple(value)
    except TypeError:  # not iterable
        fields = None
    if fields is None or not all(isinstance(f, str) and f for f in fields):
        raise IdempotencyConfigurationError(
            f"{name} must be a list of field names, not {value!r} "
            '(write ["sku"], not "sku").'
        )
    return fields


def view_ttl(value, name: str) -> timedelta | None:
    """Validate a view's own TTL (None: the TTL setting) as the settings are.

    A TTL under a minute would forget keys before retries arrive, and a huge
    one is a unit mistake: refuse them, naming the view's setting (``name``).
    """
    if value is None:
        return None
    try:
        return key_ttl(value)
    except InvalidSetting as exc:
        raise IdempotencyConfigurationError(
            f"{name} is {value!r}: it {exc} {exc.hint}".rstrip()
        ) from None


def operation_ttl(policy: Policy) -> timedelta:
    """How long this operation's keys live, refused when shorter than a lease
    and a wait, or (a steps-mode view's own) longer than UNIT_RETENTION.

    The settings are read at request time, never at import:
    ``override_settings`` may change them, so the view's TTL, checked once,
    is compared again here (a comparison, no validation)."""
    if policy.ttl is None:
        ttl, where = idempotency_settings.TTL, "IDEMPOTENCY['TTL']"
    else:
        ttl, where = policy.ttl, f"The ttl of {policy.operation!r}"
    try:
        if policy.mode == STEPS and policy.ttl is not None:
            # The TTL setting's own comparison is the retention check's.
            stepping.within_unit_retention(ttl, where)
        return outlasting_ttl(ttl, where)
    except InvalidSetting as exc:
        raise IdempotencyConfigurationError(f"{exc} {exc.hint}") from None


class Claim(units.UnitHandle):
    """The key a request holds; views see it as ``request.idempotency``."""

    def __init__(self, *, key, scope, operation, request_hash, expires_at, session=""):
        self.key = key
        self.scope = scope
        self.operation = operation
        self.request_hash = request_hash
        self.expires_at = expires_at
        # Digest of the client's session cookie: a stored answer bound to a
        # session replays only to it.
        self.session = session
        self.record_id = None
        self.attempt = None
        # True when this attempt began the record's life: it inserted the key,
        # or renewed an expired one. Earlier attempts of it left nothing.
        self.fresh = False
        self.resource = ("", "")
        # The unit's Steps handle, in steps mode only.
        self.steps = None

    @cached_property
    def unit(self) -> units.Unit:
        """This request's unit of work: the view runs with it current."""
        return units.Unit(units.KEYS, (self.scope, self.operation, self.key))

    def steps_refused(self) -> Exception:
        return IdempotencyConfigurationError(
            f"request.idempotency.step() needs mode='steps'; "
            f"{self.operation!r} runs in another mode."
        )

    def set_resource(self, obj) -> None:
        """Point the record at the object this request created: a saved one,
        whose primary key fits the record's column as text."""
        if obj.pk is None:
            raise ValueError(
                f"set_resource() needs a saved object: {obj!r} has no primary key yet."
            )
        resource_id = str(obj.pk)
        longest = IdempotencyRecord._meta.get_field("resource_id").max_length or 0
        if len(resource_id) > longest:
            # Refused here, before the answer: PostgreSQL would refuse it only
            # when the answer is stored, after the view's work.
            raise ValueError(
                f"set_resource() keeps a primary key of at most {longest} "
                f"characters as text; {obj!r}'s has {len(resource_id)}."
            )
        self.resource = (obj._meta.label_lower, resource_id)

    def __repr__(self):
        return f"<Claim {self.scope} {self.operation} {self.key!r}>"


class Keyless:
    """``request.idempotency`` of a request sent without a key where the view
    makes it optional: the view runs unguarded, so it holds no claim.

    ``set_resource()`` does nothing, so a view pointing its record at what it
    made (``perform_create`` calling it) runs with or without a key, instead
    of failing after its write; ``derive()`` and ``step()`` refuse, since a
    key derived from no key would differ on every retry. False in a test
    (``if request.idempotency:``). It serves no unit and no intent: they are
    None, as is its key.
    """

    key = unit = intent = steps = None

    def __bool__(self) -> bool:
        return False

    def set_resource(self, obj) -> None:
        """Nothing records it: the request has no key."""

    def derive(self, step: str) -> str:
        raise self._refused("derive")

    def step(self, name: str, fn: Callable, *, atomic=False, undo=None) -> Any:
        raise self._refused("step")

    def _refused(self, what: str) -> Exception:
        return IdempotencyConfigurationError(
            f"request.idempotency.{what}() needs a key, and this request sent "
            "none (the view's key is optional): test `if request.idempotency:` "
            "first, or require the key."
        )

    def __repr__(self):
        return "<Keyless>"


KEYLESS = Keyless()


class _Discard(Exception):
    """The view answered with an error that must not be stored: undo its work."""

    def __init__(self, response):
        self.response = response


class _WorkRolledBack(Exception):
    """The view's error answer is kept but its work is not: its exception
    handler marked the transaction for rollback (DRF's ``set_rollback()``
    under ``ATOMIC_REQUESTS``, for a raised 404 say), or it gave the
    operation up (``Abandon``). Leaving the view's block undoes the work;
    the answer is stored after it."""

    def __init__(self, response, answer):
        self.response = response
        self.answer = answer


def execute(request, policy: Policy, produce: Callable):
    """Run ``produce()`` at most once per key and return the answer to send.

    ``produce`` returns a rendered response, or raises ``Invalid`` with one
    that must not be saved; it runs inside the claim's transaction. Refusals
    come back as problem+json responses.
    """
    # What the trace's server span says of a keyed request (the view raised,
    # unless a line below says otherwise); never the key itself.
    outcome: str | None = FAILED
    try:
        if policy.mode == STEPS:
            stepping.refuse_atomic_requests(router.db_for_write(IdempotencyRecord))
        key = keys.parse(request.headers.get(idempotency_settings.HEADER))
        if key is None:
            if policy.required:
                raise KeyMissing(
                    f"Send an {idempotency_settings.HEADER} header with this request."
                )
            outcome = None  # not a keyed request
            _hand_to_the_view(request, KEYLESS)
            # In one transaction, as a keyed request's work: the view's writes
            # and the events it records commit together or not at all.
            try:
                with transaction.atomic(using=router.db_for_write(IdempotencyRecord)):
                    return produce()
            except Abandon as abandon:
                return stepping.abandoned(abandon, request)  # rolled back
        records = _records()
        databases.refuse_unusable(records.db, IdempotencyConfigurationError)
        claim = _new_claim(request, policy, key)
        if policy.mode == STEPS:
            produce = stepping.abandoning(produce, request)
        store = _storing(produce, request)
        response = _replay_at_one_read(claim, records)
        if response is not None:
            signals.replayed(claim, policy.mode, response)
        elif policy.mode == ATOMIC:
            response = _run_atomic(claim, store, records)
        else:
            response = _run_lease(claim, store, records, steps=policy.mode == STEPS)
        replayed = response.has_header(responses.REPLAYED_HEADER)
        if replayed:
            responses.encode_for(response, request)
        outcome = REPLAYED if replayed else EXECUTED
        return response
    except IdempotencyError as exc:
        outcome = exc.type  # the problem type: key-reused, request-in-flight...
        signals.refused(request, policy, exc)
        return problems.from_exception(exc, instance=problems.instance_of(request))
    except Invalid as invalid:
        if outcome is not None:  # a request without a key stays unannotated
            outcome = NOT_KEPT
        if isinstance(claim := getattr(request, "idempotency", None), Claim):
            status = invalid.response.status_code
            signals.failed(claim, policy.mode, status=status, reason=signals.INVALID)
        return invalid.response
    finally:
        if outcome is not None:
            tracing.annotate(
                **{
                    "idempotency.operation": policy.operation,
                    "idempotency.outcome": outcome,
                    "idempotency.replayed": outcome == REPLAYED,
                }
            )


def _new_claim(request, policy, key):
    ttl = operation_ttl(policy)
    _check_operation(policy.operation)
    scope = _scope_of(request, policy)
    claim = Claim(
        key=key,
        scope=scope,
        operation=policy.operation,
        request_hash=compute_fingerprint(
            request, policy.operation, policy.exclude_fields
        ),
        expires_at=clock.now() + ttl,
        session=responses.session_digest(request),
    )
    _hand_to_the_view(request, claim)
    return claim


def _hand_to_the_view(request, claim: "Claim | Keyless") -> None:
    request.idempotency = claim
    # A DRF Request wraps the Django one; middleware sees the inner request.
    inner = getattr(request, "_request", None)
    if inner is not None:
        inner.idempotency = claim


def _check_operation(operation) -> None:
    """Refuse an operation name the record cannot keep, before anything runs.

    An overridden ``get_idempotency_operation()`` (one built from the URL,
    say) could return one over the column's size or holding a NUL: the claim
    failed mid-request with a DataError.
    """
    field = IdempotencyRecord._meta.get_field("operation")
    problem = "use a non-empty name (text)."
    if isinstance(operation, str) and operation.strip():
        try:
            storable.check_column(operation, field, "it")
            return
        except ValueError as exc:
            problem = f"{exc}."
    raise IdempotencyConfigurationError(
        f"The operation {operation!r:.80} cannot name keys: {problem}"
    )


def _scope_of(request, policy) -> str:
    """Whose key it is: the resolver's scope, or ``anonymous`` where allowed.

    None means an anonymous client. Anything else but a non-empty name (of at
    most 255 characters, the column's size) is a resolver bug: an empty or
    "anonymous" scope would share every such client's keys, and their stored
    answers, so the request is refused before anything runs. So is a scope
    holding the unit separator (``\\x1f``), which units cannot keep apart.
    """
    scope = policy.scope(request)
    if scope is None:
        if not policy.allow_anonymous:
            raise AnonymousKey("Authenticate to send an idempotency key here.")
        return ANONYMOUS
    max_length = IdempotencyRecord._meta.get_field("scope").max_length or 0
    if (
        not isinstance(scope, str)
        or not scope.strip()
        or len(scope) > max_length
        or scope == ANONYMOUS
    ):
        raise IdempotencyConfigurationError(
            f"The scope resolver returned {scope!r} for {policy.operation!r}: "
            f"return a non-empty name of at most {max_length} characters, or "
            f"None for an anonymous client ({ANONYMOUS!r} is reserved for them)."
        )
    if units.SEPARATOR in scope:
        # The scope leads the unit's parts: holding the separator, it would
        # run into the operation's, and one unit (its recovery points, its
        # derived keys) could serve two scopes, or an inbox delivery.
        raise IdempotencyConfigurationError(
            f"The scope resolver returned {scope!r} for {policy.operation!r}: "
            "a scope cannot hold the unit separator (\\x1f); return a name "
            "without it (a digest of the principal's id, say)."
        )
    return scope


def _records():
    """The records' queryset on their database, made once per request: each
    statement of the claim reuses it."""
    manager = IdempotencyRecord.objects
    return manager.db_manager(router.db_for_write(IdempotencyRecord)).get_queryset()


def _wait() -> timedelta:
    return as_timedelta(idempotency_settings.WAIT)


def _storing(produce, request):
    """``produce``, then store its answer: the claim's last step, in its
    transaction. ``store(claim, records)`` returns the response to send."""
    watch = responses.SessionWatch(request)

    def store(claim, records):
        # record() in the view tags its events with this request's intent.
        with units.running(claim.unit):
            try:
                response = produce()
            except Abandon as abandon:
                # Atomic and lease modes have no steps to undo (steps mode
                # answers its Abandon in produce): the view's work rolls
                # back, and the abandon is the answer a retry replays.
                response = stepping.abandoned(abandon, request)
                answer = responses.keep(response, watch)
                raise _WorkRolledBack(response, answer) from abandon
        answer = responses.keep(response, watch)
        if answer is None:
            raise _Discard(response)
        if answer.status_code >= 400 and (
            transaction.get_connection(records.db).needs_rollback
        ):
            # A success is never stored over work that is gone (rule 12): the
            # completion below then fails the attempt.
            raise _WorkRolledBack(response, answer)
        _complete(claim, records, answer)
        return response

    return store


def _wait_ms() -> int:
    return max(1, math.ceil(_wait().total_seconds() * 1000))


def _replay_at_one_read(claim, records):
    """Answer a replay of a live completed record from one unlocked read.

    Such a record never changes until it expires, so it needs no transaction
    and no lock: no BEGIN, no claim, no COMMIT, in every mode. None: anything
    else (no record, pending, failed, expired), which takes the claim path.
    The key's scope is in the read's WHERE; ``_decide`` refuses another
    request hash and ``responses.replay`` another session.
    """
    record = records.read_key(claim.scope, claim.operation, claim.key)
    if record is None:
        return None  # a first request: it reads no clock here
    now = clock.now()
    if not _is_final(record, now):
        return None
    return _decide(claim, records, record, now, locked_until=None)


def _run_atomic(claim, store, records):
    started = time.monotonic()
    while True:
        try:
            return _run_atomic_once(claim, store, records)
        except ClaimRaced as raced:
            # WAIT is read only here: a request that never races pays nothing.
            deadline = started + _wait().total_seconds()
            _raise_unless_retryable(raced, records, deadline)


def _run_atomic_once(claim, store, records):
    ran = False
    # In a caller's transaction (ATOMIC_REQUESTS) the hooks run at its
    # commit, outside this code: one of the view's that raises there would
    # drop key_claimed, queued after it, with nothing here to send it again.
    # Queued before the view's hooks instead, it is sent if the view succeeded.
    succeeded: list | None = (
        [] if transaction.get_connection(records.db).in_atomic_block else None
    )
    try:
        with transaction.atomic(using=records.db):
            replay = _take(claim, records, lease=None)
            if replay is not None:
                signals.replayed(claim, ATOMIC, replay)
                return replay
            ran = True
            if succeeded is not None:
                _claimed_if_succeeded(claim, records, succeeded)
            outcome = _run_view(claim, records, store, succeeded)
    except Invalid:
        # Rolled back with the claim: no record, or the earlier one restored.
        raise
    except Exception:
        if ran and _answer_committed(claim, records):
            # A hook the view queued raised after the commit: Django dropped
            # the hooks queued after it, key_claimed among them.
            signals.claimed(claim, ATOMIC, using=records.db)
        elif ran:  # the claim's transaction itself failed (its commit, say)
            _record_failure(claim, records, fenced=False)
            _failed(claim, ATOMIC, records, 500, signals.RAISED)
        raise
    if not outcome.recorded:
        # The claim's transaction could not keep the failure: its savepoint
        # or connection broke, and everything rolled back.
        _record_failure(claim, records, fenced=False)
    if outcome.error is not None:
        raise outcome.error
    return outcome.response


class _Outcome(NamedTuple):
    response: Any
    error: Exception | None = None
    # False when a failure could not be written in the claim's transaction.
    recorded: bool = True


def _claimed_if_succeeded(claim, records, succeeded: list) -> None:
    def send():
        if succeeded:
            signals.claimed(claim, ATOMIC, using=records.db)

    transaction.on_commit(send, using=records.db)


def _run_view(claim, records, store, succeeded: list | None = None) -> _Outcome:
    """Run the view in a savepoint of the claim's transaction (atomic mode).

    A failing view rolls back its own work but not the claim, which is marked
    failed in place and commits with its request hash. A duplicate waiting on
    the key then finds that record, as in lease mode: another payload is
    refused (422) and the same one runs again. Rolled back with the claim,
    the key would look unused for a moment, and the duplicate would run.
    """
    try:
        response = _store_in_block(claim, records, store)
        if succeeded is None:
            signals.claimed(claim, ATOMIC, using=records.db)
        else:
            succeeded.append(True)  # sent by the hook queued before the view
        return _Outcome(response)
    except _Discard as discard:
        _failed(
            claim, ATOMIC, records, discard.response.status_code, signals.ERROR_STATUS
        )
        return _Outcome(discard.response, recorded=_mark_failed(claim, records))
    except Invalid:
        raise
    except Exception as exc:
        _failed(claim, ATOMIC, records, 500, signals.RAISED)
        return _Outcome(None, exc, recorded=_mark_failed(claim, records))


def _store_in_block(claim, records, store):
    """Run ``store`` in an atomic block of its own (a savepoint of the claim's
    transaction in atomic mode, the view's transaction in lease mode). An
    error answer whose work the view's handler rolled back is stored once
    the block has undone that work."""
    try:
        with transaction.atomic(using=records.db):
            return store(claim, records)
    except _WorkRolledBack as rolled_back:
        with transaction.atomic(using=records.db):
            _complete(claim, records, rolled_back.answer)
        return rolled_back.response


def _failed(claim, mode, records, status, reason):
    signals.failed(claim, mode, status=status, reason=reason, using=records.db)


def _mark_failed(claim, records) -> bool:
    """Mark the claim failed inside its transaction; False if that broke."""
    try:
        _write_failure(claim, records, fenced=True)
    except DatabaseError:
        return False
    return True


def _run_lease(claim, store, records, *, steps=False):
    lease = as_timedelta(idempotency_settings.LEASE)
    deadline = time.monotonic() + _wait().total_seconds()
    while True:
        try:
            # The claim commits on its own so the lease is visible to others.
            replay = _take_committed(claim, records, lease=lease)
            break
        except RequestInFlight:
            if time.monotonic() + POLL_INTERVAL > deadline:
                raise
        except ClaimRaced as raced:
            _raise_unless_retryable(raced, records, deadline)
            continue  # at once: what it ran into has committed
        # Sleep outside any transaction: nothing is locked while we wait.
        clock.sleep(POLL_INTERVAL)
    if replay is not None:
        signals.replayed(claim, LEASE, replay)
        return replay
    signals.claimed(claim, LEASE, using=records.db)
    try:
        if steps:
            return _run_steps(claim, records, store)
        return _store_in_block(claim, records, store)
    except LeaseLost:
        raise
    except RequestInFlight:
        # Held off before any work (steps mode: an operator's abandon is
        # compensating the unit, so its first step refused): hand the key
        # back for the next retry, and let the 409 report itself as the
        # conflict it is, not as a failure.
        _record_failure(claim, records, fenced=True)
        raise
    except _Discard as discard:
        _record_failure(claim, records, fenced=True)
        _failed(
            claim, LEASE, records, discard.response.status_code, signals.ERROR_STATUS
        )
        return discard.response
    except Invalid:
        _withdraw(claim, records)
        raise
    except Exception:
        if _answer_committed(claim, records):
            raise  # a hook the view queued raised after the commit (as above)
        # In steps mode the retry then resumes at the first step without a
        # recovery point.
        _record_failure(claim, records, fenced=True)
        _failed(claim, LEASE, records, 500, signals.RAISED)
        raise


def _run_steps(claim, records, store):
    """Run the view in no transaction: each step commits its own recovery
    point, and the answer commits with the unit's end (``_complete``)."""
    try:
        claim.steps = stepping.begin(claim, records)
        return store(claim, records)
    except StepTakenOver as exc:
        raise LeaseLost("A newer attempt took over this key's steps.") from exc
    except CompensationInProgress as exc:
        raise RequestInFlight(retry_after=exc.retry_after) from exc


def _take_committed(claim, records, *, lease):
    """Take the key in a transaction of its own, committed on return (lease mode)."""
    in_atomic_block = transaction.get_connection(records.db).in_atomic_block
    if in_atomic_block or claim.scope == ANONYMOUS:
        # Inside the caller's transaction: a savepoint undoes a refused claim.
        # Anonymous: the cap is counted in the claim's own transaction.
        with transaction.atomic(using=records.db):
            return _take(claim, records, lease=lease)
    # In autocommit the claim's one statement commits by itself, without a
    # BEGIN and COMMIT round trip each; _take opens a transaction to lock.
    return _take(claim, records, lease=lease)


def _take(claim, records, *, lease):
    """Claim the key (insert, or lock the existing row); return a replay or None.

    Runs inside the claim's transaction (atomic mode) or in autocommit (lease
    mode): locking the row and taking it over then get a transaction of their
    own, while an insert needs none.
    """
    wait_ms = _wait_ms()
    # A record can vanish between the claim and the lock (a purge deleted it);
    # then the key is free again and the next round inserts it.
    for _round in range(3):
        now = clock.now()
        locked_until = now + lease if lease else None
        try:
            record_id = records.claim(
                scope=claim.scope,
                operation=claim.operation,
                key=claim.key,
                request_hash=claim.request_hash,
                now=now,
                expires_at=claim.expires_at,
                locked_until=locked_until,
                lock_timeout_ms=wait_ms,
            )
            if record_id is not None:
                claim.record_id, claim.attempt, claim.fresh = record_id, 1, True
                _hold_anonymous_cap(claim, records, now)
                return None
            # The key exists (inserted or completed, maybe, since the replay
            # read): lock, re-read, decide and take it over while the lock
            # holds. savepoint=False: inside the claim's transaction this adds
            # no round trip.
            with transaction.atomic(using=records.db, savepoint=False):
                record = records.lock_key(
                    claim.scope, claim.operation, claim.key, lock_timeout_ms=wait_ms
                )
                if record is not None:
                    return _decide(claim, records, record, now, locked_until)
        except OperationalError as exc:
            if _is_lock_timeout(exc):
                raise RequestInFlight(retry_after=_wait().total_seconds()) from exc
            if isolation.is_serialization_failure(exc):
                raise ClaimRaced from exc
            raise
    raise RequestInFlight(retry_after=_wait().total_seconds())


def _raise_unless_retryable(raced, records, deadline):
    """409 where a raced claim cannot be taken again: inside a caller's
    transaction, whose snapshot stays, or once WAIT is over."""
    in_atomic_block = transaction.get_connection(records.db).in_atomic_block
    if in_atomic_block or time.monotonic() > deadline:
        raise RequestInFlight(retry_after=_wait().total_seconds()) from raced.__cause__


def _is_final(record, now) -> bool:
    """A completed, unexpired record never changes: it is safe to read unlocked."""
    return record.state == State.COMPLETED and record.expires_at > now


def _decide(claim, records, record, now, locked_until):
    if record.expires_at <= now and not _leased(record, now):
        # Past its retention the key is forgotten: this request runs as new.
        # Not while an attempt still holds its lease (steps renew the lease,
        # not the TTL): the purge keeps such a record too.
        _reclaim(claim, records, record, locked_until, renew=True, now=now)
        _hold_anonymous_cap(claim, records, now)
        return None
    if record.request_hash != claim.request_hash:
        raise PayloadMismatch(
            "This key was first used with a different method, path or body."
        )
    if record.state == State.COMPLETED:
        return responses.replay(record, claim.session)
    if _leased(record, now):
        raise RequestInFlight(retry_after=(record.locked_until - now).total_seconds())
    # Failed, or a lapsed lease: this request takes the key over.
    _reclaim(claim, records, record, locked_until, renew=False, now=now)
    return None


def _leased(record, now) -> bool:
    """An attempt holds the key: its lease (lease and steps modes) runs."""
    return bool(
        record.state == State.PENDING
        and record.locked_until
        and record.locked_until > now
    )


def _hold_anonymous_cap(claim, records, now):
    """Refuse a new live key in the anonymous scope past the cap.

    Anyone can mint keys there: bound the live rows per operation so an
    unauthenticated client cannot grow the table forever. Runs after the
    claim's write, in its transaction: the raise rolls the claim back, and
    the lock (held until that transaction ends) makes concurrent claims count
    one after another, each seeing the others' committed rows.
    """
    if claim.scope != ANONYMOUS:
        return
    cap = idempotency_settings.ANONYMOUS_MAX_KEYS
    live = records.count_live_serialized(
        claim.scope, claim.operation, now, limit=cap + 1, lock_timeout_ms=_wait_ms()
    )
    if live > cap:
        raise AnonymousKeysExhausted(retry_after=60)


def _reclaim(claim, records, record, locked_until, *, renew, now):
    changes = {
        "state": State.PENDING,
        "attempts": record.attempts + 1,
        "locked_until": locked_until,
    }
    if renew:
        changes.update(
            request_hash=claim.request_hash,
            status_code=None,
            response_body=None,
            response_headers={},
            session_digest="",
            resource_type="",
            resource_id="",
            created_at=now,
            completed_at=None,
            expires_at=claim.expires_at,
        )
    # Fenced on the attempt read, for backends without row locks (SQLite).
    if not records.filter(pk=record.pk, attempts=record.attempts).update(**changes):
        raise RequestInFlight(retry_after=_wait().total_seconds())
    claim.record_id, claim.attempt = record.pk, record.attempts + 1
    claim.fresh = renew


def _complete(claim, records, answer):
    if claim.steps is not None:
        # Steps mode runs no transaction around the view: the answer and the
        # unit's end commit together here.
        with transaction.atomic(using=records.db):
            _store_answer(claim, records, answer)
            claim.steps.finish()
        return
    _store_answer(claim, records, answer)


def _store_answer(claim, records, answer):
    resource_type, resource_id = claim.resource
    # Fenced: only the attempt that holds the claim may complete it.
    completed = records.complete(
        claim.record_id,
        claim.attempt,
        status_code=answer.status_code,
        body=answer.body,
        headers=answer.headers,
        session_digest=answer.session,
        resource_type=resource_type,
        resource_id=resource_id,
        now=clock.now(),
    )
    if not completed:
        raise LeaseLost("The lease ran out and a newer attempt took this key.")


def _answer_committed(claim, records) -> bool:
    """Whether this attempt's answer committed, so that what raised came
    after the commit (an on_commit hook of the view's: a task enqueued with
    the broker down) and the attempt did not fail: a retry replays it."""
    if transaction.get_connection(records.db).in_atomic_block:
        return False  # nothing commits inside a caller's transaction
    try:
        return records.filter(
            pk=claim.record_id, attempts=claim.attempt, state=State.COMPLETED
        ).exists()
    except DatabaseError:
        return False  # cannot tell: recorded as failed, which the retry sees


def _record_failure(claim, records, *, fenced):
    """Mark the attempt failed so a retry runs again; never mask the error."""
    try:
        with transaction.atomic(using=records.db):
            _write_failure(claim, records, fenced=fenced)
    except DatabaseError:
        # The original failure matters more; the retry runs again either way.
        logger.warning(
            "Could not record the failed attempt",
            exc_info=True,
            # Only lease mode fences its failures.
            extra=signals.identity(claim, LEASE if fenced else ATOMIC),
        )


def _withdraw(claim, records):
    """Undo a committed lease claim whose request failed validation."""
    if not claim.fresh or (claim.steps is not None and claim.steps.progressed):
        # Earlier attempts ran, or steps of this one committed their recovery
        # points, maybe calling out with the derived keys: keep the record
        # (failed), so the retry resumes the unit past its steps instead of
        # starting it anew, and another payload under the key is refused.
        _record_failure(claim, records, fenced=True)
        return
    try:
        # Fenced: a newer attempt that took the key over keeps it.
        withdrawn, _rows = records.filter(
            pk=claim.record_id, attempts=claim.attempt, state=State.PENDING
        ).delete()
        if withdrawn and claim.steps is not None:
            claim.steps.withdraw()  # no step stored: its unit goes too
    except DatabaseError:
        # The lease lapses on its own; the retry then takes the key over.
        logger.warning(
            "Could not withdraw the claim",
            exc_info=True,
            extra=signals.identity(claim, LEASE),
        )


def _write_failure(claim, records, *, fenced):
    if fenced:
        records.filter(
            pk=claim.record_id, attempts=claim.attempt, state=State.PENDING
        ).update(state=State.FAILED, locked_until=None)
    else:
        records.upsert_failed(
            scope=claim.scope,
            operation=claim.operation,
            key=claim.key,
            request_hash=claim.request_hash,
            now=clock.now(),
            expires_at=claim.expires_at,
        )


def _is_lock_timeout(exc) -> bool:
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) == "55P03":  # lock_not_available
        return True
    return "database is locked" in str(exc)  # SQLite's busy timeout
