"""A unit of work: one hop of an intent, with a stable identity.

Three things are units: a keyed request (scope, operation, key), an inbox
delivery (subscriber, message id) and a webhook receipt (source, delivery
id). Each app's handle (``request.idempotency``, the inbox ``Delivery``, the
handler's ``Event``) carries one as ``.unit`` and offers ``derive(step)``.

The *intent* is the identity of the unit that started the chain. A unit
started by a client or a provider is its own intent; a consumer's unit
inherits the intent its message carries, so three hops later the work still
names the request that caused it. Neither ever holds a raw client key: both
are SHA-256 digests.
"""

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db.models import CharField, F, Func, Value
from django.db.models.functions import Concat

# The kinds of unit; each app builds only its own.
KEYS = "keys"
INBOX = "inbox"
WEBHOOKS = "webhooks"

# What derive() hashes the intent from; a step of that name derives it too,
# which is harmless: the intent is no secret, only never the raw key.
INTENT_STEP = "once:intent"


# What joins the parts before they are hashed.
SEPARATOR = "\x1f"


def _digest(parts: tuple[str, ...]) -> str:
    # The separator cannot appear in a header-borne key, nor in a step's name
    # (derive() refuses it): what follows the last one is the step, so two
    # units of one subscriber or source never derive the same key, even where
    # a message or delivery id holds it.
    return hashlib.sha256(SEPARATOR.join(parts).encode()).hexdigest()


class Identity(Func):
    """``Unit(kind, parts).identity`` as the database computes it, from the
    columns holding the parts: the purge compares units with their owners'
    rows in one statement, loading none of them. Not for keys, which hash
    their parts without the kind."""

    # SQLite: the hex digest Django registers on its connections.
    function = "SHA256"
    output_field = CharField()

    def __init__(self, kind: str, *columns: str):
        if kind == KEYS:
            raise ValueError("A key's unit hashes its parts without its kind.")
        # The text _digest() hashes: "", kind, the parts and the step "".
        pieces: list = [Value(f"{SEPARATOR}{kind}")]
        for column in columns:
            pieces += [Value(SEPARATOR), F(column)]
        super().__init__(Concat(*pieces, Value(SEPARATOR)))

    def as_postgresql(self, compiler, connection, **extra_context):
        # sha256() is built in (PostgreSQL 11+); DIGEST() needs pgcrypto.
        template = "ENCODE(SHA256(CONVERT_TO(%(expressions)s, 'UTF8')), 'hex')"
        return self.as_sql(compiler, connection, template=template, **extra_context)


@dataclass(frozen=True)
class Unit:
    """One hop's identity: what it is (``kind``) and what names it (``parts``).

    ``parts`` hold what is unique on the app's record, in the order its unique
    constraint names them. ``inherited_intent`` is the intent a consumed
    message carried, or "" for a unit that starts a chain.
    """

    kind: str
    parts: tuple[str, ...]
    inherited_intent: str = field(default="", compare=False)

    def derive(self, step: str) -> str:
        """A key for the downstream call ``step``: the same on every retry and
        redelivery of this unit, different for any other unit."""
        if SEPARATOR in step:
            # Else ("m", step "a\x1fb") would derive the key of message
            # "m\x1fa"'s step "b": another unit's downstream call.
            raise ValueError(
                f"A step's name cannot hold the unit separator (\\x1f): {step!r}."
            )
        # Keys hash (scope, operation, key, step) as 0.1 did, so keys derived
        # before units existed stay the same. The other kinds lead with an
        # empty part, then their kind: a scope is never empty and never holds
        # the separator, so no keyed request (a tenant named "inbox", say)
        # shares another kind's unit, its recovery points or derived keys.
        prefix = self.parts if self.kind == KEYS else ("", self.kind, *self.parts)
        return _digest((*prefix, step))

    # Cached: signals, logs, spans and steps all ask for it on the request's
    # path, and each would hash again.
    @cached_property
    def identity(self) -> str:
        """This unit's own id (64 hex digits): where its steps are stored."""
        return self.derive("")

    @cached_property
    def intent(self) -> str:
        """The id of the intent this unit serves (64 hex digits)."""
        return self.inherited_intent or self.derive(INTENT_STEP)


_current: ContextVar[Unit | None] = ContextVar("once_current_unit", default=None)
# The intent served where no unit runs but its work does: an operator's
# compensation, which knows the unit by its stored row alone.
_serving: ContextVar[str] = ContextVar("once_serving_intent", default="")


def current() -> Unit | None:
    """The unit whose code is running, if any: ``record()`` tags its events
    with this unit's intent."""
    return _current.get()


def current_intent() -> str:
    """The intent the running code serves ("" when none): the current unit's,
    else the one ``serving()`` names."""
    unit = _current.get()
    return unit.intent if unit is not None else _serving.get()


@contextmanager
def serving(intent: str) -> Iterator[None]:
    """Serve ``intent`` with no unit current: for a unit's work run from its
    stored row (its parts, and so ``derive()``, are not kept there). A unit
    current around it (a consumer that gives another unit up) is not the
    one served: it steps aside until the block ends."""
    token, outer = _serving.set(intent), _current.set(None)
    try:
        yield
    finally:
        _current.reset(outer)
        _serving.reset(token)


@contextmanager
def running(unit: Unit) -> Iterator[Unit]:
    """Make ``unit`` the current one while its code runs (nests: a unit run
    inside another is current until it ends, then the outer one is again)."""
    token = _current.set(unit)
    try:
        yield unit
    finally:
        _current.reset(token)


class UnitHandle:
    """What each app's handle offers its code (``request.idempotency``, the
    inbox's ``Delivery``, a handler's ``Event``): the unit it serves, keys
    derived from it, and its steps.

    A handle names its ``unit``, holds ``steps`` (the unit's ``Steps``, or None
    where it runs in one transaction) and says in ``steps_refused`` why not.
    """

    steps: Any

    @property
    def unit(self) -> Unit:
        raise NotImplementedError

    @property
    def intent(self) -> str:
        """The intent this unit serves; ``record()`` in its code passes it on."""
        return self.unit.intent

    def derive(self, step: str) -> str:
        """A key for the downstream call ``step``: the same every time this
        unit runs again (a client's retry, a redelivery, a reprocessing)."""
        return self.unit.derive(step)

    def step(self, name: str, fn: Callable, *, atomic=False, undo=None) -> Any:
        """Run ``fn(derive(name))`` once for this unit: a retry gets its stored
        result (see ``idempotency.shared.steps.Steps.step``)."""
        if self.steps is None:
            raise self.steps_refused()
        return self.steps.step(name, fn, atomic=atomic, undo=undo)

    def steps_refused(self) -> Exception:
        """The error ``step()`` raises where the unit runs without steps."""
        raise NotImplementedError
