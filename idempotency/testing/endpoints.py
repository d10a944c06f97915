"""The failure cases of a keyed HTTP endpoint, run against the user's own view.

Describe the endpoint once with ``Endpoint`` and call a check, or subclass
``idempotency.testing.suites.EndpointSuite`` to get every case as a test.
Each check sends real requests through Django's test client to the user's
URL, on the user's database, and raises ``GuaranteeBroken`` naming the
guarantee and showing the evidence when the view does not keep it.
"""

import json
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pkgutil import resolve_name
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.db import connection, router

from ..conf import idempotency_settings
from ..models import IdempotencyRecord
from ..shared.testing.clock import controlled_clock
from ..shared.testing.crashes import (
    SimulatedCrash,
    failing_after_first_write,
    require_committed_transactions,
    slowed,
)
from ..shared.testing.threads import run_concurrently
from . import guarantees as g

# A pause after each statement of the racing requests: long enough to make a
# check-then-act window show, short enough to stay under the default WAIT.
RACE_PAUSE = 0.02
# How long the derived-key probe's duplicate waits for the lease holder.
SHORT_WAIT = 0.05
REPLAYED = "Idempotent-Replayed"


@dataclass
class Endpoint:
    """A keyed endpoint as the checks drive it.

    ``payload`` is a JSON-able body, or a function returning one (called for
    each new intent, so each can use fresh values). ``effects()`` returns a
    number that grows with the view's business effect (``Order.objects.count``;
    None counts as 0).
    ``client(name)`` returns a test client acting as the principal ``name``;
    two names must be two scopes. By default it is a DRF ``APIClient``
    force-authenticated as a user of that name.
    """

    url: str
    payload: Any
    effects: Callable[[], Any]
    client: Callable[[str], Any] | None = None
    method: str = "post"
    # A body the view refuses (400) before changing anything; enables the
    # validation case.
    invalid_payload: Any = None
    # The body sent with a used key; by default the payload plus a field.
    changed_payload: Any = None
    # A context manager under which the view fails; by default the kit makes
    # the view raise right after its first write.
    fail: Callable[[], AbstractContextManager] | None = None
    # How long the client keeps retrying (an offline queue); the key must
    # outlive it.
    retry_horizon: timedelta | None = None
    # The function the view calls for the outside world, as mock.patch names
    # it, and how to read the idempotency key it is given.
    downstream: str | None = None
    downstream_key: Callable[..., Any] | None = None
    # How many identical requests race.
    concurrency: int = 8

    def describe(self, key: str) -> str:
        return f"{self.method.upper()} {self.url} with {header()} {key}"


def header() -> str:
    return idempotency_settings.HEADER


def default_client(name: str) -> Any:
    """A DRF ``APIClient`` force-authenticated as the user ``once-<name>``
    (created on first use, with no usable password)."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    users = get_user_model()._default_manager
    lookup = {get_user_model().USERNAME_FIELD: f"once-{name}"}
    user = users.filter(**lookup).first() or users.create(**lookup)
    client = APIClient()
    client.force_authenticate(user=user)
    return client


class _Case:
    """One case's requests and readings against an endpoint."""

    def __init__(self, endpoint: Endpoint, name: str):
        self.endpoint = endpoint
        self.name = name
        self.payload = self.new_payload()

    def new_payload(self):
        """The body of a new intent (the same one unless payload is a function)."""
        payload = self.endpoint.payload
        return payload() if callable(payload) else payload

    def client(self, name: str = "alice"):
        factory = self.endpoint.client or default_client
        return factory(name)

    def key(self, label: str = "") -> str:
        return f"once-{self.name}{label}-{uuid.uuid4().hex[:12]}"

    def send(self, client, key: str, payload=None):
        body = self.payload if payload is None else payload
        if not isinstance(body, bytes | str):
            body = json.dumps(body)
        meta = "HTTP_" + header().upper().replace("-", "_")
        send = getattr(client, self.endpoint.method.lower())
        return send(
            self.endpoint.url,
            data=body,
            content_type="application/json",
            **{meta: key},
        )

    def effects(self):
        return g.measure(self.endpoint.effects)

    def require_success(self, response, what: str = "the first request"):
        """Refuse to go on when a request that must work did not."""
        if not 200 <= response.status_code < 300:
            raise g.CannotCheck(
                self.name,
                f"{what} answered {g.answer(response)}; give a payload and a "
                "client the view accepts.",
            )

    def first(self, client, key: str, payload=None):
        """Send a request that must succeed and change ``effects()``; return
        the answer and the readings before and after it."""
        before = self.effects()
        response = self.send(client, key, payload)
        self.require_success(response)
        after = self.effects()
        if after == before:
            raise g.CannotCheck(
                self.name,
                f"effects() stayed {before} after the view answered "
                f"{g.answer(response)}; it must count the view's business effect.",
            )
        return response, before, after

    def one_effect(self, client=None) -> Any:
        """Send one fresh request and return how much it changed ``effects()``."""
        client = client or self.client()
        key = self.key("-baseline")
        _, before, after = self.first(client, key, self.new_payload())
        return after - before


def _replayed(response) -> bool:
    return response.get(REPLAYED) == "true"


def check_lost_response(endpoint: Endpoint) -> None:
    """The answer is lost after the commit; the retry must replay it byte for
    byte, and the view must not run again (failure case 1)."""
    __tracebackhide__ = True
    case = _Case(endpoint, "lost-response")
    client, key = case.client(), case.key()
    # Its answer never reaches the client.
    first, before, ran_once = case.first(client, key)
    retry = case.send(client, key)
    after = case.effects()
    problems = []
    if after != ran_once:
        problems.append(f"the view ran again: {g.change(before, after, ran_once)}")
    if retry.status_code != first.status_code:
        problems.append("the retry's status differs from the first answer's")
    elif retry.content != first.content:
        problems.append("the retry's body differs from the first answer's")
    if not _replayed(retry):
        problems.append(f"the retry carries no {REPLAYED}: true")
    if problems:
        raise g.broken(
            g.LOST_RESPONSE,
            endpoint.describe(key),
            *problems,
            f"first answer: {g.answer(first)}",
            f"retry:        {g.answer(retry)}",
        )


def check_race(endpoint: Endpoint) -> None:
    """Identical requests race on one key in separate threads, each on its own
    connection, on committed transactions (failure case 2)."""
    __tracebackhide__ = True
    case = _Case(endpoint, "race")
    require_committed_transactions(case.name)
    if connection.vendor == "sqlite":
        pytest.skip(
            "the race needs concurrent writers and row locks (PostgreSQL); "
            "SQLite runs one writer at a time"
        )
    delta = case.one_effect()
    count = endpoint.concurrency
    clients = [case.client() for _ in range(count)]
    key = case.key()

    def send(index):
        try:
            with slowed(RACE_PAUSE):
                return case.send(clients[index], key)
        except Exception as exc:  # a crashed request is an answer too
            return exc

    before = case.effects()
    answers = run_concurrently(count, send)
    after = case.effects()
    ran = [a for a in answers if _is_response(a) and _ran(a)]
    problems = []
    if after - before != delta:
        problems.append(
            f"{count} requests at once: {g.change(before, after, before + delta)}"
        )
    if len(ran) != 1:
        problems.append(f"{len(ran)} answers came from running the view, not 1")
    winner = ran[0] if ran else None
    for index, answer in enumerate(answers):
        if answer is winner:
            continue
        if not _is_response(answer):
            problems.append(f"request {index} raised {answer!r}")
        elif answer.status_code == 409:
            if not answer.get("Retry-After"):
                problems.append(f"request {index}: 409 without Retry-After")
        elif _replayed(answer):
            if winner is not None and (
                answer.status_code != winner.status_code
                or answer.content != winner.content
            ):
                problems.append(
                    f"request {index} replayed another answer: {g.answer(answer)}"
                )
        elif not _ran(answer):
            problems.append(f"request {index}: {g.answer(answer)}")
    if problems:
        raise g.broken(
            g.RACE,
            endpoint.describe(key),
            *problems,
            f"answers: {_tally(answers)}",
        )


def check_payload_mismatch(endpoint: Endpoint) -> None:
    """The same key comes back with another payload: 422, and nothing runs
    (failure case 3)."""
    __tracebackhide__ = True
    case = _Case(endpoint, "payload-mismatch")
    client, key = case.client(), case.key()
    changed = endpoint.changed_payload
    if changed is None:
        if not isinstance(case.payload, dict):
            pytest.skip("set changed_payload: the payload is not a JSON object")
        changed = {**case.payload, "once_probe": "another payload"}
    _, before, ran_once = case.first(client, key)
    reused = case.send(client, key, changed)
    after = case.effects()
    problems = []
    if reused.status_code != 422:
        problems.append(f"the reused key answered {g.answer(reused)}, not 422")
    if after != ran_once:
        problems.append(f"the view ran for it: {g.change(before, after, ran_once)}")
    if problems:
        raise g.broken(
            g.PAYLOAD_MISMATCH,
            endpoint.describe(key),
            f"first payload: {g.shown(case.payload)}",
            f"then:          {g.shown(changed)}",
            *problems,
        )


def check_failed_attempt(endpoint: Endpoint) -> None:
    """The view fails after its first write (an exception or a 5xx): nothing
    may remain of it, and the retry with the same key must run."""
    __tracebackhide__ = True
    case = _Case(endpoint, "failed-attempt")
    client = case.client()
    delta = case.one_effect(client)
    key = case.key()
    before = case.effects()
    error = None
    with _failing(endpoint) as where:
        try:
            first = case.send(client, key)
            failure = f"answered {g.answer(first)}"
        except Exception as exc:  # the failure made to happen, or the view's
            first, error, failure = None, exc, f"raised {type(exc).__name__}"
    if where.after is None:
        if error is not None:
            raise error  # not ours: the view failed by itself
        pytest.skip(
            "the view wrote nothing for the kit to fail after; give the "
            "endpoint a fail() context manager"
        )
    if first is not None and first.status_code < 500:
        raise g.CannotCheck(
            case.name,
            f"the view {failure} although it was made to fail "
            f"({where.describe()}); does it catch the exception?",
        )
    failed = case.effects()
    retry = case.send(client, key)
    after = case.effects()
    problems = []
    if failed != before:
        problems.append(
            f"the failed attempt left its effect: {g.change(before, failed, before)}"
        )
    if _replayed(retry):
        problems.append("the retry got the failed attempt's answer, replayed")
    elif not _ran(retry):
        problems.append("the retry did not run")
    if not problems and after - failed != delta:
        problems.append(f"the retry: {g.change(failed, after, failed + delta)}")
    if problems:
        raise g.broken(
            g.FAILED_ATTEMPT,
            endpoint.describe(key),
            f"failure: {where.describe()}; the attempt {failure}",
            *problems,
            f"retry: {g.answer(retry)}",
        )


def check_validation_failure(endpoint: Endpoint) -> None:
    """A request fails validation; the corrected retry with the same key must
    run (the 400 is not stored)."""
    __tracebackhide__ = True
    case = _Case(endpoint, "validation")
    if endpoint.invalid_payload is None:
        pytest.skip("set invalid_payload (a body the view refuses) for this case")
    client = case.client()
    delta = case.one_effect(client)
    key = case.key()
    before = case.effects()
    invalid = case.send(client, key, endpoint.invalid_payload)
    if invalid.status_code < 400:
        raise g.CannotCheck(
            case.name,
            f"invalid_payload was accepted: {g.answer(invalid)}",
        )
    refused = case.effects()
    corrected = case.send(client, key)
    after = case.effects()
    problems = []
    if refused != before:
        problems.append(
            f"the refused request left an effect: {g.change(before, refused, before)}"
        )
    if not _ran(corrected):
        problems.append(f"the corrected retry did not run: {g.answer(corrected)}")
        if corrected.status_code == 422:
            problems.append(
                "the refusal was stored: raise ValidationError (for example "
                "serializer.is_valid(raise_exception=True)) instead of "
                "returning a 400 response"
            )
    elif after - refused != delta:
        problems.append(
            f"the corrected retry: {g.change(refused, after, refused + delta)}"
        )
    if problems:
        raise g.broken(
            g.VALIDATION,
            endpoint.describe(key),
            f"refused: {g.answer(invalid)}",
            *problems,
        )


def check_expiry(endpoint: Endpoint) -> None:
    """Within its TTL a key replays; after it a late retry runs as new, as
    documented (failure case 8). With ``retry_horizon``, the TTL must
    outlast it. The clock is moved, never slept."""
    __tracebackhide__ = True
    case = _Case(endpoint, "expiry")
    client, key = case.client(), case.key()
    _, before, ran_once = case.first(client, key)
    delta = ran_once - before
    record = _record(key)
    if record is None:
        raise g.broken(
            g.WITHIN_TTL,
            endpoint.describe(key),
            "no idempotency record was stored: the view is not guarded by "
            "IdempotencyMixin or @idempotent",
        )
    # The view's TTL: expires_at was set a moment before created_at.
    ttl = timedelta(
        seconds=round((record.expires_at - record.created_at).total_seconds())
    )
    horizon = endpoint.retry_horizon
    with controlled_clock() as clock:
        # Just before the end: a second, or half a TTL shorter than that.
        margin = min(timedelta(seconds=1), ttl / 2)
        clock.advance_to(record.expires_at - margin)
        within = case.send(client, key)
        within_effects = case.effects()
        if not _replayed(within) or within_effects != ran_once:
            raise g.broken(
                g.WITHIN_TTL,
                endpoint.describe(key),
                f"TTL {ttl}; a retry {margin} before it ended answered "
                f"{g.answer(within)}",
                g.change(before, within_effects, ran_once),
            )
        if horizon is not None and horizon >= ttl:
            clock.advance_to(record.created_at + horizon)
            late = case.send(client, key)
            raise g.broken(
                g.RETRY_HORIZON,
                endpoint.describe(key),
                f"the key expires {ttl} after the first request, but the client "
                f"retries for {horizon} (retry_horizon)",
                f"a retry {horizon} later answered {g.answer(late)}: "
                f"{g.change(before, case.effects(), ran_once)}",
                "raise the view's idempotency_ttl (or @idempotent ttl=) above "
                "the client's retry horizon",
            )
        clock.advance_past(record.expires_at)
        late = case.send(client, key)
    after = case.effects()
    if _replayed(late) or after - ran_once != delta:
        raise g.broken(
            g.EXPIRED,
            endpoint.describe(key),
            f"TTL {ttl}; a retry 1 s after it ended answered {g.answer(late)}",
            g.change(ran_once, after, ran_once + delta),
        )


def check_other_scope(endpoint: Endpoint) -> None:
    """Another principal sends the same key and payload: its request runs as
    its own and never gets the first one's stored answer."""
    __tracebackhide__ = True
    case = _Case(endpoint, "other-scope")
    alice, bob = case.client("alice"), case.client("bob")
    key = case.key()
    first, before, ran_once = case.first(alice, key)
    delta = ran_once - before
    theirs = case.send(bob, key)
    after = case.effects()
    problems = []
    if _replayed(theirs):
        problems.append("bob's request with alice's key got alice's stored answer")
    elif not _ran(theirs):
        problems.append(f"bob's request did not run: {g.answer(theirs)}")
    elif after - ran_once != delta:
        problems.append(f"bob's request: {g.change(ran_once, after, ran_once + delta)}")
    if problems:
        raise g.broken(
            g.OTHER_SCOPE,
            endpoint.describe(key) + ", as alice then as bob",
            *problems,
            f"alice: {g.answer(first)}",
            f"bob:   {g.answer(theirs)}",
        )


def check_derived_key(endpoint: Endpoint) -> None:
    """The downstream call succeeds and the process dies before completing;
    once the lease lapses the retry must call downstream again with the same
    derived key, so the provider deduplicates (failure case 7)."""
    __tracebackhide__ = True
    case = _Case(endpoint, "derived-key")
    downstream = endpoint.downstream
    if not downstream:
        pytest.skip(
            "set downstream (what the view calls for the outside world, as "
            "mock.patch names it) for this case"
        )
    client = case.client()
    with _watching_downstream(downstream, endpoint.downstream_key) as calls:
        delta = case.one_effect(client)
        calls.clear()
        key = case.key()
        before = case.effects()
        calls.crash_next = True
        try:
            crashed = case.send(client, key)
        except SimulatedCrash:
            crashed = None
        if not calls:
            raise g.CannotCheck(
                case.name, f"the view never called {endpoint.downstream}"
            )
        if crashed is not None:
            raise g.CannotCheck(
                case.name,
                f"the process was made to die after {endpoint.downstream} "
                f"returned, yet the view answered {g.answer(crashed)}",
            )
        died = case.effects()
        record = _record(key)
        problems = []
        with controlled_clock() as clock:
            if record is not None and record.locked_until is not None:
                with _short_wait():
                    early = case.send(client, key)
                if early.status_code != 409 or not early.get("Retry-After"):
                    problems.append(
                        f"while the lease held, a retry answered {g.answer(early)}, "
                        "not 409 with Retry-After"
                    )
                clock.advance_past(record.locked_until)
            retry = case.send(client, key)
        after = case.effects()
    first_key = calls[0]
    if first_key in (None, ""):
        problems.append(f"{endpoint.downstream} was called without an idempotency key")
    elif first_key == key:
        problems.append(
            f"the key given to {endpoint.downstream} is the client's "
            f"{header()} itself; derive one per step with "
            "request.idempotency.derive(step)"
        )
    if len(calls) > 1 and calls[1] != first_key:
        problems.append(
            f"the retry called {endpoint.downstream} with another key: "
            f"{first_key!r}, then {calls[1]!r}; the provider sees two requests"
        )
    if died != before:
        problems.append(
            "the attempt that died left a local effect: "
            + g.change(before, died, before)
        )
    if not _ran(retry):
        problems.append(f"the retry did not complete: {g.answer(retry)}")
    elif after - died != delta:
        problems.append(f"the retry: {g.change(died, after, died + delta)}")
    if problems:
        raise g.broken(
            g.DERIVED_KEY,
            endpoint.describe(key),
            f"{endpoint.downstream} returned, then the process died",
            *problems,
        )


# Every case of an endpoint, for ``pytest.mark.parametrize("check", ...)``.
ENDPOINT_CHECKS = (
    check_lost_response,
    check_race,
    check_payload_mismatch,
    check_failed_attempt,
    check_validation_failure,
    check_expiry,
    check_other_scope,
    check_derived_key,
)


# Helpers.


def _record(key: str):
    """The idempotency record of ``key`` (the checks' keys are unique)."""
    records = IdempotencyRecord.objects.db_manager(
        router.db_for_write(IdempotencyRecord)
    )
    return records.filter(key=key).first()


def _is_response(answer) -> bool:
    return not isinstance(answer, BaseException)


def _ran(response) -> bool:
    """The answer came from running the view, successfully."""
    return 200 <= response.status_code < 300 and not _replayed(response)


def _tally(answers) -> str:
    """``201 x1, 201 replayed x6, 409 x1``."""
    counts: dict[str, int] = {}
    for answer in answers:
        if not _is_response(answer):
            label = type(answer).__name__
        else:
            label = str(answer.status_code) + (" replayed" if _replayed(answer) else "")
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{label} x{n}" for label, n in sorted(counts.items()))


@dataclass
class _Failure:
    """Where the view was made to fail."""

    custom: bool
    # The write the kit failed after; with a fail() hook, "fail()".
    after: str | None = None

    def describe(self) -> str:
        if self.custom:
            return "the endpoint's fail()"
        return f"the kit raised right after the view's first write ({self.after})"


@contextmanager
def _failing(endpoint: Endpoint):
    if endpoint.fail is not None:
        with endpoint.fail():
            yield _Failure(custom=True, after="fail()")
        return
    # The claim's own writes, and a session the client may save, are not the
    # view's business effect.
    ignored = [f'"{IdempotencyRecord._meta.db_table}"', '"django_session"']
    with failing_after_first_write(ignore_tables=ignored) as injection:
        failure = _Failure(custom=False)
        yield failure
        failure.after = injection.after


@contextmanager
def _short_wait():
    """Answer a duplicate without waiting the full WAIT: the probe only needs
    to see the 409 a client would get."""
    from django.test import override_settings

    configured = getattr(settings, "IDEMPOTENCY", {})
    with override_settings(IDEMPOTENCY={**configured, "WAIT": SHORT_WAIT}):
        yield


class _Calls(list):
    """The keys downstream was called with; ``crash_next`` kills the process
    right after the next call returns."""

    crash_next = False


@contextmanager
def _watching_downstream(target: str, read_key: Callable | None):
    """Wrap ``target`` to record the key of each call, and to die right
    after it returns when ``crash_next`` is set."""
    owner_path, _, name = target.rpartition(".")
    owner = resolve_name(owner_path)
    original = getattr(owner, name)
    read_key = read_key or _idempotency_key_argument
    calls = _Calls()

    def watched(*args, **kwargs):
        calls.append(read_key(*args, **kwargs))
        result = original(*args, **kwargs)
        if calls.crash_next:
            calls.crash_next = False
            raise SimulatedCrash(f"the process died after {target}")
        return result

    with mock.patch.object(owner, name, new=watched):
        yield calls


def _idempotency_key_argument(*args, **kwargs):
    return kwargs.get("idempotency_key")
