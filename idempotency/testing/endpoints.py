"""The failure cases of a keyed HTTP endpoint, run against the user's own view.

Describe the endpoint once with ``Endpoint`` and call a check, or subclass
``idempotency.testing.suites.EndpointSuite`` to get every case as a test.
Each check sends real requests through Django's test client to the user's
URL, on the user's database, and raises ``GuaranteeBroken`` naming the
guarantee and showing the evidence when the view does not keep it.
"""

import json
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pkgutil import resolve_name
from typing import Any
from unittest import mock
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.db import connection, router
from django.test.client import BOUNDARY, encode_multipart

from ..conf import idempotency_settings
from ..models import IdempotencyRecord
from ..querysets import IdempotencyRecordQuerySet
from ..shared.settings import as_timedelta
from ..shared.steps.models import StepRecord, UnitRecord
from ..shared.testing.clock import controlled_clock
from ..shared.testing.compensations import abandon_after_steps
from ..shared.testing.crashes import (
    AFTER,
    BEFORE,
    InjectedFailure,
    SimulatedCrash,
    commit_points,
    failing_after_first_write,
    failing_as_first_save_completes,
    require_committed_transactions,
    slowed,
)
from ..shared.testing.messages import sent_straight, tasks_sent
from ..shared.testing.steps import each_once, growth, renamed_steps, step_kills
from ..shared.testing.threads import run_concurrently
from . import guarantees as g

# A pause after each statement of the racing requests: long enough to make a
# check-then-act window show, short enough to stay under the default WAIT.
RACE_PAUSE = 0.02
# How long the derived-key probe's duplicate waits for the lease holder.
SHORT_WAIT = 0.05
REPLAYED = "Idempotent-Replayed"
JSON = "application/json"
URLENCODED = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"


@dataclass
class Endpoint:
    """A keyed endpoint as the checks drive it.

    ``payload`` is a JSON-able body, or a function returning one (called for
    each new intent, so each can use fresh values); so are
    ``invalid_payload`` and ``changed_payload``, and ``url`` (a detail route
    acting once on its object: create a new object for each intent).
    ``effects()`` returns a number that grows with the view's business effect
    (``Order.objects.count``; None counts as 0), or a dict of numbers, one
    per outside effect.
    ``client(name)`` returns a test client acting as the principal ``name``;
    two names must be two scopes. By default it is a DRF ``APIClient``
    force-authenticated as a user of that name.
    """

    url: str | Callable[[], str]
    payload: Any
    effects: Callable[[], Any]
    client: Callable[[str], Any] | None = None
    method: str = "post"
    # A body the view refuses (400) before changing anything; enables the
    # validation case.
    invalid_payload: Any = None
    # The body sent with a used key; by default the payload plus a field.
    changed_payload: Any = None
    # The payload fields the view leaves out of its fingerprint on purpose
    # (its exclude_fields, dotted for nested ones): the kit changes every
    # other field in turn under a used key.
    exclude_fields: Collection[str] = ()
    # A context manager under which the view fails; by default the kit makes
    # the view raise right after its first write.
    fail: Callable[[], AbstractContextManager] | None = None
    # How long the client keeps retrying (an offline queue); the key must
    # outlive it.
    retry_horizon: timedelta | float | None = None
    # The function the view calls for the outside world, as mock.patch names
    # it, and how to read the idempotency key it is given.
    downstream: str | None = None
    downstream_key: Callable[..., Any] | None = None
    # How many identical requests race.
    concurrency: int = 8
    # How the body is sent: a dict payload is encoded as JSON, or as a form
    # (urlencoded or multipart) for a view reading request.POST.
    content_type: str = JSON
    # Steps mode: the steps whose effect stays on purpose when the unit gives
    # up (a mail sent); every other step moving effects() needs an undo.
    kept_steps: Collection[str] = ()

    def describe(self, key: str, url: str | None = None) -> str:
        url = url or (self.url if isinstance(self.url, str) else "url()")
        return f"{self.method.upper()} {url} with {header()} {key}"


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
        self.url, self.payload = self.new_intent()

    def new_intent(self) -> tuple[str, Any]:
        """The path and the body of a new intent (the same ones unless url or
        payload is a function)."""
        return self.body(self.endpoint.url), self.body(self.endpoint.payload)

    def another_url(self) -> str:
        """The path of another intent: the same one unless url is a function
        (a detail route, whose object a request may act on only once)."""
        return self.body(self.endpoint.url)

    def describe(self, key: str) -> str:
        return self.endpoint.describe(key, self.url)

    @staticmethod
    def body(value):
        """A body as given, or what the function given returns."""
        return value() if callable(value) else value

    def client(self, name: str = "alice"):
        factory = self.endpoint.client or default_client
        return factory(name)

    def key(self, label: str = "") -> str:
        return f"once-{self.name}{label}-{uuid.uuid4().hex[:12]}"

    def send(self, client, key: str, payload=None, url: str | None = None):
        body = self.payload if payload is None else payload
        body, content_type = _encoded(body, self.endpoint.content_type)
        meta = "HTTP_" + header().upper().replace("-", "_")
        send = getattr(client, self.endpoint.method.lower())
        return send(
            url or self.url,
            data=body,
            content_type=content_type,
            **{meta: key},
        )

    def effects(self):
        return g.measure(self.endpoint.effects)

    def require_success(self, response, what: str = "the first request"):
        """Refuse to go on when a request that must work did not."""
        if not _succeeded(response):
            raise g.CannotCheck(
                self.name,
                f"{what} answered {g.answer(response)}; give a payload and a "
                "client the view accepts.",
                precondition=f"{what} to succeed",
            )

    def first(self, client, key: str, payload=None, url: str | None = None):
        """Send a request that must succeed and change ``effects()``; return
        the answer and the readings before and after it."""
        before = self.effects()
        response = self.send(client, key, payload, url)
        self.require_success(response)
        after = self.effects()
        if after == before:
            raise g.CannotCheck(
                self.name,
                f"effects() stayed {before} after the view answered "
                f"{g.answer(response)}; it must count the view's business effect.",
                precondition="effects() to grow when the view runs",
            )
        return response, before, after

    def clean_run(self, watch, *, new_intent: bool = False):
        """Send one request that must succeed under ``watch`` (a context
        manager recording the run: its commits, its steps), with the path and
        body of a new intent if ``new_intent``; return the client, the record
        and how much the request changed ``effects()``."""
        require_committed_transactions(self.name)
        client = self.client()
        before = self.effects()
        with watch as record:
            url, payload = self.new_intent() if new_intent else (None, None)
            response = self.send(client, self.key("-baseline"), payload, url)
        self.require_success(response)
        return client, record, growth(before, self.effects())

    def one_effect(self, client=None) -> Any:
        """Send one fresh request and return how much it changed ``effects()``."""
        client = client or self.client()
        key = self.key("-baseline")
        url, payload = self.new_intent()
        _, before, after = self.first(client, key, payload, url)
        return growth(before, after)


def _encoded(body, content_type: str) -> tuple[bytes | str, str]:
    """``body`` as ``content_type`` carries it, and the header to send: text
    and bytes as given, anything else as JSON or a form. Encoded here, since
    DRF's test client sends a given content type's data as it is."""
    if isinstance(body, bytes | str):
        return body, content_type
    media = content_type.partition(";")[0].strip().lower()
    if media == URLENCODED:
        return urlencode(body, doseq=True), content_type
    if media == MULTIPART:
        return encode_multipart(BOUNDARY, body), f"{MULTIPART}; boundary={BOUNDARY}"
    return json.dumps(body), content_type


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
    problems = g.Problems(g.LOST_RESPONSE, case.describe(key))
    if after != ran_once:
        problems.append(f"the view ran again: {g.change(before, after, ran_once)}")
    if first.streaming and not _replayed(retry):
        # As any answer the library does not keep: a retry gets 409
        # answer-not-kept, so a client that lost it can never read it again.
        problems.append(
            "the first answer was streamed (StreamingHttpResponse, "
            "FileResponse): the library never keeps a streamed answer, so the "
            "retry cannot get it back; answer with an HttpResponse to have it "
            "replayed"
        )
    elif retry.status_code != first.status_code:
        problems.append("the retry's status differs from the first answer's")
    elif g.content(retry) != g.content(first):
        problems.append("the retry's body differs from the first answer's")
    if not _replayed(retry):
        problems.append(f"the retry carries no {REPLAYED}: true")
    problems.raise_if_any(
        f"first answer: {g.answer(first)}", f"retry:        {g.answer(retry)}"
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
    count = endpoint.concurrency
    if count < 2:
        # One request races nothing: a check-then-act view would pass.
        raise g.CannotCheck(
            case.name,
            f"concurrency is {count}; leave it at 8 or raise it.",
            precondition="at least 2 requests at once",
        )
    delta = case.one_effect()
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
    problems = g.Problems(g.RACE, case.describe(key))
    problems += [
        f"{count} requests at once: {verdict}"
        for verdict in each_once(before, after, delta)
    ]
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
                or g.content(answer) != g.content(winner)
            ):
                problems.append(
                    f"request {index} replayed another answer: {g.answer(answer)}"
                )
        elif not _ran(answer):
            problems.append(f"request {index}: {g.answer(answer)}")
    problems.raise_if_any(f"answers: {_tally(answers)}")


def check_payload_mismatch(endpoint: Endpoint) -> None:
    """The same key comes back with another payload: 422, and nothing runs
    (failure case 3)."""
    __tracebackhide__ = True
    case = _Case(endpoint, "payload-mismatch")
    client, key = case.client(), case.key()
    changed = case.body(endpoint.changed_payload)
    if changed is None:
        if not isinstance(case.payload, dict):
            pytest.skip("set changed_payload: the payload is not a JSON object")
        changed = {**case.payload, "once_probe": "another payload"}
    _, before, ran_once = case.first(client, key)
    reused = case.send(client, key, changed)
    after = case.effects()
    problems = g.Problems(
        g.PAYLOAD_MISMATCH,
        case.describe(key),
        f"first payload: {g.shown(case.payload)}",
        f"then:          {g.shown(changed)}",
    )
    if reused.status_code != 422:
        problems.append(f"the reused key answered {g.answer(reused)}, not 422")
    if after != ran_once:
        problems.append(f"the view ran for it: {g.change(before, after, ran_once)}")
    problems.raise_if_any()


def check_each_field_fingerprinted(endpoint: Endpoint) -> None:
    """The same key comes back with one payload field changed, for each field
    in turn (nested ones too): 422 every time, and nothing runs. Fields in
    ``exclude_fields`` are left alone."""
    __tracebackhide__ = True
    case = _Case(endpoint, "each-field")
    if not isinstance(case.payload, dict) or not case.payload:
        pytest.skip(
            "the payload has no fields to change (not a JSON object); "
            "changed_payload covers it in the payload-mismatch case"
        )
    changes = list(_field_changes(case.payload, endpoint.exclude_fields))
    if not changes:
        pytest.skip("exclude_fields names every field of the payload")
    client, key = case.client(), case.key()
    _, before, ran_once = case.first(client, key)
    if _record(key) is None:
        raise g.broken(g.FINGERPRINT, case.describe(key), g.NOTHING_STORED)
    problems = g.Problems(
        g.FINGERPRINT,
        case.describe(key),
        f"first payload: {g.shown(case.payload)}",
    )
    for change in changes:
        reused = case.send(client, key, change.payload)
        if reused.status_code != 422:
            problems.append(
                f"{change.describe()}: the reused key answered "
                f"{g.answer(reused)}, not 422"
            )
    after = case.effects()
    if after != ran_once:
        problems.append(
            f"the view ran for a changed payload: {g.change(before, after, ran_once)}"
        )
    problems.raise_if_any(
        "a field the fingerprint leaves out lets another request replay "
        "this one's answer; if leaving it out is deliberate, name it in "
        "exclude_fields"
    )


def check_failed_attempt(endpoint: Endpoint) -> None:
    """The view fails after its first write (an exception or a 5xx): nothing
    may remain of it, and the retry with the same key must run. A view that
    catches the failure and answers a success breaks the guarantee that a
    failure is never stored as one.

    With ``fail()``, the view fails under it. Without, the kit fails it twice:
    inside the ORM right after its first write statement (Django then refuses
    every further query of the transaction), and as its first model save
    completes (``post_save``), where the view's own code gets the exception,
    as from the step after its write.
    """
    __tracebackhide__ = True
    case = _Case(endpoint, "failed-attempt")
    injections: list[Callable[[], AbstractContextManager[_Failure]]]
    if endpoint.fail is not None:
        injections = [partial(_failing_under, endpoint.fail)]
    else:
        injections = [_failing_after_first_write, _failing_as_first_save_completes]
    failed_somewhere = False
    for failing in injections:
        attempt = _failed_attempt(case, failing())
        if attempt.failure.where is not None:
            failed_somewhere = True
            attempt.judge(g.FAILED_ATTEMPT)
    if failed_somewhere:
        return
    if endpoint.fail is not None:
        raise g.CannotCheck(
            case.name,
            "the mock fail() patched in was never called: patch the function "
            "where the view looks it up (mock.patch names the module that uses "
            "it, not the one defining it)",
            precondition="fail() to make the view fail",
        )
    pytest.skip(
        "the view wrote nothing for the kit to fail after; give the "
        "endpoint a fail() context manager"
    )


def check_failure_at_completion(endpoint: Endpoint) -> None:
    """The view runs to its end and answers; then the kit fails the completion
    (the statement storing its answer, before the commit). Nothing the view
    did may remain, the client gets no success, and the retry runs."""
    __tracebackhide__ = True
    case = _Case(endpoint, "failure-at-completion")
    attempt = _failed_attempt(case, _failing_at_completion())
    if attempt.failure.where is None:
        raise g.broken(
            g.FAILURE_NOT_STORED_AS_SUCCESS,
            case.describe(attempt.key),
            f"the attempt {attempt.outcome}, and the kit found no answer being "
            "stored to fail",
            g.NOTHING_STORED,
        )
    attempt.judge(g.FAILURE_NOT_STORED_AS_SUCCESS)


@dataclass
class _FailedAttempt:
    """A request made to fail, and what the checks read around it."""

    case: _Case
    client: Any
    key: str
    failure: "_Failure"
    # One request's effect, and the readings before and after the failure.
    delta: Any
    before: Any
    failed: Any = None
    answered: Any = None  # the response, None when the request raised
    outcome: str = ""

    def judge(self, guarantee: str) -> None:
        """Retry, and raise ``GuaranteeBroken`` when the evidence shows an
        effect left or a retry that did not run (``guarantee``), or a success
        answered to the failure (always the guarantee that forbids it)."""
        __tracebackhide__ = True
        retry = self.case.send(self.client, self.key)
        after = self.case.effects()
        problems = g.Problems(
            guarantee,
            self.case.describe(self.key),
            f"failure: {self.failure.where}; the attempt {self.outcome}",
        )
        if _replayed(retry):
            problems.append("the retry got the failed attempt's answer, replayed")
        elif not _ran(retry):
            problems.append("the retry did not run")
        else:
            # Judged on the end: an effect the failed attempt kept by design
            # (a step's recovery point, a call downstream that dedupes on its
            # derived key) is fine when the retry does not repeat it.
            problems += [
                f"after the retry: {verdict}"
                for verdict in each_once(self.before, after, self.delta)
            ]
        if problems and self.failed != self.before:
            problems.insert(
                0,
                "the failed attempt left its effect: "
                + g.change(self.before, self.failed, self.before),
            )
        answered = self.answered
        if answered is not None and _succeeded(answered):
            # Whatever happened next, the client was told it worked.
            problems.guarantee = g.FAILURE_NOT_STORED_AS_SUCCESS
            problems.insert(
                0,
                f"the view answered {answered.status_code} although it failed: "
                "it caught the failure and answered a success (the kit's failure "
                "is an IntegrityError, as the database's are: an except "
                "IntegrityError taking it for a duplicate catches it too)",
            )
        problems.raise_if_any(f"retry: {g.answer(retry)}")


def _failed_attempt(case: _Case, failing) -> _FailedAttempt:
    """Measure one request's effect, then send a new one under ``failing``."""
    client = case.client()
    delta = case.one_effect(client)
    # An intent of its own, and its retry's: the case may fail the view twice,
    # and a detail route acts on its object once.
    case.url, case.payload = case.new_intent()
    key = case.key()
    before = case.effects()
    error = None
    with failing as failure:
        try:
            answered = case.send(client, key)
            outcome = f"answered {g.answer(answered)}"
        except Exception as exc:  # the failure made to happen, or the view's
            answered, error, outcome = None, exc, f"raised {type(exc).__name__}"
    if failure.where is None and error is not None:
        raise error  # not ours: the view failed by itself
    attempt = _FailedAttempt(case, client, key, failure, delta, before)
    attempt.failed = case.effects()
    attempt.answered, attempt.outcome = answered, outcome
    return attempt


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
    invalid = case.send(client, key, case.body(endpoint.invalid_payload))
    if _succeeded(invalid):
        raise g.CannotCheck(
            case.name,
            f"invalid_payload was accepted: {g.answer(invalid)}",
            precondition="the view to refuse invalid_payload",
        )
    refused = case.effects()
    corrected = case.send(client, key)
    after = case.effects()
    problems = g.Problems(
        g.VALIDATION, case.describe(key), f"refused: {g.answer(invalid)}"
    )
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
    elif verdicts := each_once(refused, after, delta):
        problems += [f"the corrected retry: {verdict}" for verdict in verdicts]
    elif _record(key) is None:
        problems.append(g.NOTHING_STORED)
    problems.raise_if_any()


def check_expiry(endpoint: Endpoint) -> None:
    """Within its TTL a key replays; after it a late retry runs as new, as
    documented (failure case 8). With ``retry_horizon``, the TTL must
    outlast it. The clock is moved, never slept."""
    __tracebackhide__ = True
    case = _Case(endpoint, "expiry")
    client, key = case.client(), case.key()
    _, before, ran_once = case.first(client, key)
    delta = growth(before, ran_once)
    record = _record(key)
    if record is None:
        raise g.broken(g.WITHIN_TTL, case.describe(key), g.NOTHING_STORED)
    # The view's TTL: expires_at was set a moment before created_at.
    ttl = timedelta(
        seconds=round((record.expires_at - record.created_at).total_seconds())
    )
    # Seconds or a timedelta, as a view's ttl.
    horizon = None if endpoint.retry_horizon is None else _horizon(endpoint)
    with controlled_clock() as clock:
        # Just before the end: a second, or half a TTL shorter than that.
        margin = min(timedelta(seconds=1), ttl / 2)
        clock.advance_to(record.expires_at - margin)
        within = case.send(client, key)
        within_effects = case.effects()
        if not _replayed(within) or within_effects != ran_once:
            raise g.broken(
                g.WITHIN_TTL,
                case.describe(key),
                f"TTL {ttl}; a retry {margin} before it ended answered "
                f"{g.answer(within)}",
                g.change(before, within_effects, ran_once),
            )
        if horizon is not None and horizon >= ttl:
            clock.advance_to(record.created_at + horizon)
            late = case.send(client, key)
            raise g.broken(
                g.RETRY_HORIZON,
                case.describe(key),
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
    verdicts = _each_once_where_moved(ran_once, after, delta)
    # A view may refuse it itself, acting once on its object ("already
    # shipped"): the key is forgotten all the same, and nothing ran twice.
    refused = 400 <= late.status_code < 500 and not _replayed(late)
    if not (_ran(late) or refused) or verdicts:
        raise g.broken(
            g.EXPIRED,
            case.describe(key),
            f"TTL {ttl}; a retry 1 s after it ended answered {g.answer(late)}",
            *verdicts,
        )


def _horizon(endpoint: Endpoint) -> timedelta:
    try:
        return as_timedelta(endpoint.retry_horizon)
    except TypeError:
        raise TypeError(
            "retry_horizon must be seconds or a timedelta (how long the client "
            f"keeps retrying), not {endpoint.retry_horizon!r}"
        ) from None


def _each_once_where_moved(before, after, delta) -> list[str]:
    """``each_once()`` for the effects that moved. One that stayed was
    deduplicated downstream: a late retry derives the same downstream keys
    (``request.idempotency.derive()``), and the provider answers with the
    first call's result."""
    if not isinstance(delta, dict):
        return each_once(before, after, delta) if after != before else []
    moved = [name for name in delta if after[name] != before.get(name, 0)]
    return each_once(
        {name: before.get(name, 0) for name in moved},
        {name: after[name] for name in moved},
        {name: delta[name] for name in moved},
    )


def check_crash_after_commit(endpoint: Endpoint) -> None:
    """The process dies right after the commit that stores the request's
    answer (or, when none is stored, its last commit), before the answer
    leaves and before any ``on_commit`` callback runs; the client retries.
    The retry must replay the stored answer, and each effect must have
    happened once: one left to ``on_commit`` (a charge, a mail sent once the
    transaction commits) is lost for good, since every retry replays."""
    __tracebackhide__ = True
    case = _Case(endpoint, "crash-after-commit")
    with tasks_sent() as sent:
        client, clean, delta = case.clean_run(commit_points(), new_intent=True)
    if sent:
        # Out of the database, which no count of rows shows: sent on commit,
        # a death right after the commit loses it for good; sent before, a
        # failure after it rolls the work back and the retry sends it again.
        raise sent_straight(
            g.CRASH_AFTER_COMMIT,
            f"{endpoint.method.upper()} {case.url}",
            sent,
            "the view's work",
        )
    if not clean.points:
        raise g.CannotCheck(
            case.name,
            "the request made nothing durable in the database, so there is no "
            "commit to die after; is the view keyed?",
        )
    last = len(clean.points)
    # A write after the answer's commit (an on_commit callback's, a
    # middleware's) is a later durable point: dying after it would lose
    # nothing. So die after each point in turn until the answer is stored.
    for number in range(1, last + 1):
        key = case.key()
        url, payload = case.new_intent()
        before = case.effects()
        with (
            commit_points(crash_at=number, when=AFTER) as points,
            suppress(SimulatedCrash),
        ):
            case.send(client, key, payload, url)
        if points.crashed is None:
            return  # this request took a shorter path: nothing to die after
        if number == last or _completed(key):
            break
    retry = case.send(client, key, payload, url)
    problems = g.Problems(
        g.CRASH_AFTER_COMMIT,
        endpoint.describe(key, url),
        f"the process died {points.crashed}",
    )
    if not _replayed(retry):
        problems.append(f"the retry was not replayed: {g.answer(retry)}")
    problems += [
        f"after the retry: {verdict}"
        for verdict in each_once(before, case.effects(), delta)
    ]
    problems.raise_if_any(
        "make the effect in the transaction (a row, an outbox event the relay "
        "delivers) or in a step, never in transaction.on_commit()"
    )


def check_other_scope(endpoint: Endpoint) -> None:
    """Another principal sends the same key and payload: its request runs as
    its own and never gets the first one's stored answer."""
    __tracebackhide__ = True
    case = _Case(endpoint, "other-scope")
    alice, bob = case.client("alice"), case.client("bob")
    key = case.key()
    first, before, ran_once = case.first(alice, key)
    delta = growth(before, ran_once)
    if _record(key) is None:
        # Bob's request would run, proving nothing about scopes.
        raise g.broken(
            g.OTHER_SCOPE,
            case.describe(key) + ", as alice",
            f"alice: {g.answer(first)}",
            g.NOTHING_STORED,
        )
    # Bob acts on an object of his own when the path names one.
    theirs = case.send(bob, key, url=case.another_url())
    after = case.effects()
    problems = g.Problems(g.OTHER_SCOPE, case.describe(key) + ", as alice then as bob")
    if _replayed(theirs):
        problems.append("bob's request with alice's key got alice's stored answer")
    elif not _ran(theirs):
        problems.append(f"bob's request did not run: {g.answer(theirs)}")
    else:
        problems += [
            f"bob's request: {verdict}" for verdict in each_once(ran_once, after, delta)
        ]
    problems.raise_if_any(f"alice: {g.answer(first)}", f"bob:   {g.answer(theirs)}")


def check_derived_key(endpoint: Endpoint) -> None:
    """The downstream call succeeds and the process dies before completing;
    once the lease lapses the retry must call downstream again with the same
    derived key, so the provider deduplicates (failure case 7)."""
    __tracebackhide__ = True
    case = _Case(endpoint, "derived-key")
    downstream = _required_downstream(endpoint)
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
                case.name,
                f"the view never called {endpoint.downstream}",
                precondition="the view to call downstream",
            )
        if crashed is not None:
            raise g.CannotCheck(
                case.name,
                f"the process was made to die after {endpoint.downstream} "
                f"returned, yet the view answered {g.answer(crashed)}",
            )
        died = case.effects()
        record = _record(key)
        problems = g.Problems(
            g.DERIVED_KEY,
            case.describe(key),
            f"{endpoint.downstream} returned, then the process died",
        )
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
        problems.append(_no_key(endpoint))
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
    if not _ran(retry):
        ended = [f"the retry did not complete: {g.answer(retry)}"]
    else:
        # Judged on the end: the charge the dead attempt made downstream is
        # kept, and the retry's call with the same key must not repeat it.
        ended = [
            f"after the retry: {verdict}" for verdict in each_once(before, after, delta)
        ]
    if ended and died != before:
        problems.append(
            "the attempt that died left its effect: " + g.change(before, died, before)
        )
    problems += ended
    problems.raise_if_any()


def check_crash_after_each_step(endpoint: Endpoint) -> None:
    """A steps-mode view dies right after each of its steps' recovery points
    in turn, then just before each; once its lease lapses the client
    retries: each effect must have happened once (``effects()`` may return a
    dict of counts, one per outside effect, to have each judged on its own).
    Skipped for a view that runs no step."""
    __tracebackhide__ = True
    case = _Case(endpoint, "crash-after-step")
    client, (probe, points), delta = case.clean_run(_steps_and_points())
    if not probe.steps:
        pytest.skip("the view ran no step: it is not a steps-mode view")
    problems = []
    for number, name in enumerate(probe.steps, 1):
        key = case.key()
        url, payload = case.new_intent()
        before = case.effects()
        with step_kills(kill_after=number) as kills, suppress(SimulatedCrash):
            case.send(client, key, payload, url)
        if kills.killed is None:
            continue  # this run took a shorter path
        with controlled_clock() as clock:
            record = _record(key)
            if record is not None and record.locked_until is not None:
                clock.advance_past(record.locked_until)
            with step_kills() as retried:
                retry = case.send(client, key, payload, url)
        if not _ran(retry):
            problems.append(
                f"killed right after step {name!r}, the retry did not complete: "
                f"{g.answer(retry)}"
            )
            continue
        found = [
            f"killed right after step {name!r}, then retried: {verdict}"
            for verdict in each_once(before, case.effects(), delta)
        ]
        if found and (renamed := renamed_steps(kills, retried, len(probe.steps))):
            found.append(renamed)
        problems += found
    problems += _die_before_each_recovery_point(case, client, points, delta)
    if problems:
        raise g.broken(
            g.CRASH_AFTER_STEP,
            f"{endpoint.method.upper()} {case.url}; its steps: {probe.describe()}",
            *problems,
        )


@contextmanager
def _steps_and_points():
    """Record a run's steps and its durable points together."""
    with step_kills() as steps, commit_points() as points:
        yield steps, points


def _die_before_each_recovery_point(case: _Case, client, points, delta) -> list[str]:
    """For each step's recovery point of the clean run (``points``), a new
    key: the process dies just before it, after the step's call returned;
    once the lease lapses the client retries, and the step runs again. Its
    call must use the ``key`` it is given, so the provider dedupes it: one
    under a key of its own is made twice."""
    problems = []
    for number, steps in sorted(points.recovery_points.items()):
        key = case.key()
        url, payload = case.new_intent()
        before = case.effects()
        with controlled_clock() as clock:
            with (
                commit_points(crash_at=number, when=BEFORE) as dying,
                suppress(SimulatedCrash),
            ):
                case.send(client, key, payload, url)
            if dying.crashed is None:
                continue  # this run took a shorter path
            record = _record(key)
            if record is not None and record.locked_until is not None:
                clock.advance_past(record.locked_until)
            retry = case.send(client, key, payload, url)
        names = ", ".join(repr(step) for step in steps)
        died = f"died {dying.crashed} (the recovery point of step {names})"
        if not _ran(retry):
            problems.append(f"{died}, the retry did not complete: {g.answer(retry)}")
            continue
        found = [
            f"{died}, then retried: {verdict}"
            for verdict in each_once(before, case.effects(), delta)
        ]
        if found:
            found.append(
                f"the retry ran step {names} again, as it must after a death "
                "before its recovery point: its outside call must pass the key "
                "it is given, so the provider dedupes the second call (one "
                "under a key of its own, uuid4(), or none is made twice)"
            )
        problems += found
    return problems


def check_abandon_undoes_each_step(endpoint: Endpoint) -> None:
    """A steps-mode view killed right after its last step is abandoned as
    the console does: each step that moved ``effects()`` is undone by its own
    undo once, last first; then the compensation dies right after each undo
    returns and is abandoned again, undoing nothing twice. ``effects()`` must
    count what stands (``charges - refunds``). Skipped for a view that runs
    no step."""
    __tracebackhide__ = True
    case = _Case(endpoint, "abandon")
    require_committed_transactions(case.name)
    client = case.client()

    def start():
        key = case.key()
        url, payload = case.new_intent()
        return partial(case.send, client, key, payload, url)

    subject = f"{endpoint.method.upper()} {case.url}; its steps: {{steps}}"
    if not abandon_after_steps(case.name, start, endpoint, g.COMPENSATION, subject):
        pytest.skip("the view ran no step: it is not a steps-mode view")


def check_downstream_key_scoped(endpoint: Endpoint) -> None:
    """Alice and bob send the same key and payload: each request calls
    downstream, with keys that differ, or the provider takes bob's call for
    a retry of alice's and one of them is never charged."""
    __tracebackhide__ = True
    case = _Case(endpoint, "scoped-downstream-key")
    downstream = _required_downstream(endpoint)
    alice, bob = case.client("alice"), case.client("bob")
    key = case.key()
    with _watching_downstream(downstream, endpoint.downstream_key) as calls:
        case.first(alice, key)
        alices = list(calls)
        calls.clear()
        theirs = case.send(bob, key, url=case.another_url())
        bobs = list(calls)
    if not alices:
        raise g.CannotCheck(
            case.name,
            f"alice's request never called {downstream}",
            precondition="the view to call downstream",
        )
    if _record(key) is None:
        raise g.broken(g.SCOPED_DOWNSTREAM_KEY, case.describe(key), g.NOTHING_STORED)
    if not bobs:
        raise g.CannotCheck(
            case.name,
            f"bob's request with alice's key never called {downstream}: "
            f"{g.answer(theirs)} (the other-scope case shows why)",
            precondition="bob's request to run as his own",
        )
    if alices[0] in (None, ""):
        raise g.broken(g.SCOPED_DOWNSTREAM_KEY, case.describe(key), _no_key(endpoint))
    shared = [each for each in bobs if each in alices]
    if shared:
        raise g.broken(
            g.SCOPED_DOWNSTREAM_KEY,
            case.describe(key) + ", as alice then as bob",
            f"alice's request called {downstream} with {alices[0]!r}",
            f"bob's request called it with {shared[0]!r}: the provider takes "
            "bob's call for a retry of alice's, and answers it with alice's result",
            "derive each step's key with request.idempotency.derive(step), which "
            "includes the scope; never build it from the client's key alone",
        )


# Every case of an endpoint, for ``pytest.mark.parametrize("check", ...)``.
ENDPOINT_CHECKS = (
    check_lost_response,
    check_race,
    check_payload_mismatch,
    check_each_field_fingerprinted,
    check_failed_attempt,
    check_failure_at_completion,
    check_crash_after_commit,
    check_validation_failure,
    check_expiry,
    check_other_scope,
    check_derived_key,
    check_downstream_key_scoped,
)


# Helpers.


def _no_key(endpoint: Endpoint) -> str:
    """No key read from a call to downstream: the view may pass it some other
    way than the keyword the default reader looks at (positionally)."""
    return (
        f"{endpoint.downstream} was called without an idempotency key, as "
        "downstream_key reads it (by default, the idempotency_key keyword "
        "argument); if the view passes it otherwise, make downstream_key "
        "return it"
    )


def _required_downstream(endpoint: Endpoint) -> str:
    """The downstream target; the case is skipped without one."""
    if not endpoint.downstream:
        pytest.skip(
            "set downstream (what the view calls for the outside world, as "
            "mock.patch names it) for this case"
        )
    return endpoint.downstream


@dataclass
class _FieldChange:
    """One payload field changed: its dotted name, both values, the body."""

    name: str
    old: Any
    new: Any
    payload: dict

    def describe(self) -> str:
        return f"{self.name} changed ({g.shown(self.old)} → {g.shown(self.new)})"


def _field_changes(
    payload: dict, excluded: Collection[str], prefix: str = ""
) -> Iterator[_FieldChange]:
    """Each field of ``payload`` changed in turn, nested objects' fields
    one by one; fields named in ``excluded`` (or under one) are kept."""
    for field, value in payload.items():
        name = f"{prefix}{field}"
        if name in excluded:
            continue
        if isinstance(value, dict) and value:
            for inner in _field_changes(value, excluded, f"{name}."):
                body = {**payload, field: inner.payload}
                yield _FieldChange(inner.name, inner.old, inner.new, body)
            continue
        new = _another_value(value)
        yield _FieldChange(name, value, new, {**payload, field: new})


def _another_value(value) -> Any:
    """A value of the same kind that no fingerprint can take for ``value``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return f"{value}-changed"
    if isinstance(value, list):
        return [*value, value[-1] if value else "once-probe"]
    return "once-probe"  # None, or an empty object


def _record(key: str):
    """The idempotency record of ``key`` (the checks' keys are unique)."""
    records = IdempotencyRecord.objects.db_manager(
        router.db_for_write(IdempotencyRecord)
    )
    return records.filter(key=key).first()


def _completed(key: str) -> bool:
    """Whether the answer of ``key`` is stored (its retry replays it)."""
    record = _record(key)
    return record is not None and record.state == IdempotencyRecord.State.COMPLETED


def _is_response(answer) -> bool:
    return not isinstance(answer, BaseException)


def _succeeded(response) -> bool:
    """Whether the view's answer is a success: a 2xx, or a redirect (as a
    Post/Redirect/Get view answers), which the library keeps like one."""
    return response.status_code < 400


def _ran(response) -> bool:
    """The answer came from running the view, successfully."""
    return _succeeded(response) and not _replayed(response)


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
    """Where the view was made to fail; None until it was."""

    where: str | None = None


_FAIL_EXAMPLE = (
    'def fail(self): return mock.patch("shop.payments.notify", '
    "side_effect=ConnectionError)"
)


@contextmanager
def _failing_under(fail: Callable[[], AbstractContextManager]) -> Iterator[_Failure]:
    # A patcher is a context manager and callable too: called, it complains
    # about a missing argument instead of saying what fail is for.
    if hasattr(fail, "__enter__") or not callable(fail):
        raise TypeError(
            "fail must be a function returning a context manager, not "
            f"{fail!r}: {_FAIL_EXAMPLE}"
        )
    manager = fail()
    if not hasattr(manager, "__enter__"):
        raise TypeError(
            f"fail() returned {manager!r}, not a context manager: {_FAIL_EXAMPLE}"
        )
    failure = _Failure("the endpoint's fail()")
    with manager as patched:
        yield failure
    if isinstance(patched, mock.NonCallableMock) and not patched.called:
        # A patch the view never reached (patched where the view does not
        # look it up): nothing failed, whatever the view answered.
        failure.where = None


@contextmanager
def _failing_after_first_write() -> Iterator[_Failure]:
    # The claim's own writes (in steps mode its unit's and steps' records
    # too), and a session the client may save, are not the view's business
    # effect: failing after them proves nothing about the view.
    claims = (IdempotencyRecord, UnitRecord, StepRecord)
    ignored = [f'"{model._meta.db_table}"' for model in claims]
    ignored.append('"django_session"')
    with failing_after_first_write(ignore_tables=ignored) as injection:
        failure = _Failure()
        yield failure
    if injection.after is not None:
        failure.where = (
            f"the kit raised right after the view's first write ({injection.after})"
        )


@contextmanager
def _failing_as_first_save_completes() -> Iterator[_Failure]:
    """Raise ``InjectedFailure`` from ``post_save`` of the view's first saved
    model: the row is written and the transaction sound, and the exception
    reaches the view's code as a failure of its next step would."""
    failure = _Failure()
    # The claim's and the session's rows are not the view's.
    ignored = {IdempotencyRecord, *_session_models()}
    with failing_as_first_save_completes(ignored) as injection:
        yield failure
    if injection.after is not None:
        failure.where = (
            f"the kit raised as the view's first save completed ({injection.after})"
        )


def _session_models() -> list:
    from django.apps import apps

    if not apps.is_installed("django.contrib.sessions"):
        return []
    from django.contrib.sessions.models import Session

    return [Session]


@contextmanager
def _failing_at_completion() -> Iterator[_Failure]:
    """Raise ``InjectedFailure`` right after the claim stores the view's
    answer, before anything commits: the view has made all its writes and
    returned, and cannot catch it."""
    failure = _Failure()
    complete = IdempotencyRecordQuerySet.complete

    def failing_complete(records, *args, **kwargs):
        completed = complete(records, *args, **kwargs)
        if failure.where is None:
            failure.where = (
                "the kit raised at the completion, right after the view's "
                "answer was stored and before the commit"
            )
            raise InjectedFailure("injected by the proof kit at the completion")
        return completed

    with mock.patch.object(IdempotencyRecordQuerySet, "complete", failing_complete):
        yield failure


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
