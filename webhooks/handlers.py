"""Register the functions that act on verified webhook events.

    from webhooks.handlers import on

    @on("stripe", "payment_intent.succeeded")
    def mark_paid(event):
        ...

A handler runs inside the transaction that marks the receipt processed, so
its database writes and the "processed" mark commit together or not at all,
with the event's unit current: ``record()`` there carries the event's intent.
Modules named ``webhooks`` in installed apps are imported on first dispatch.

A handler that calls the outside world registers with ``steps=True``: it runs
in no transaction, each outside call an ``event.step(name, fn)`` whose result
is a recovery point of its own, and a retry of the receipt resumes at the
first unfinished step (see ``idempotency.shared.steps``). The handlers of one
event type are all of one kind.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from types import FunctionType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from idempotency.shared import callables, units

from . import bodies

_registry: dict[tuple[str, str], list[Callable]] = {}
# The handlers registered with steps=True, by identity: a handler may be an
# object that cannot be hashed (a dataclass with __call__).
_steps_handlers: dict[int, Callable] = {}
_discovered = False


@dataclass(frozen=True)
class Event(units.UnitHandle):
    """What a handler receives: the receipt and the parsed event."""

    receipt: Any
    source: str
    event_type: str
    delivery_id: str
    occurred_at: datetime | None
    # A steps handler's steps (processing runs them); None for the others,
    # whose one transaction leaves no room for a recovery point.
    steps: Any = field(default=None, compare=False, repr=False)

    def steps_refused(self) -> Exception:
        return ImproperlyConfigured(
            "event.step() needs a handler registered with @on(..., "
            "steps=True): the others run in one transaction, where a "
            "step's recovery point cannot commit."
        )

    @cached_property
    def data(self) -> dict | None:
        """The event's JSON object: the JSON body, or a form body's ``payload``.

        Read by the Content-Type the body came with, as the intake read it, so
        it is a dict for every source that requires JSON; None only for a
        "raw" HMAC source's body that holds none (read ``receipt.body``).
        """
        try:
            return bodies.json_object(
                bytes(self.receipt.body), self.receipt.headers.get("Content-Type")
            )
        except ValueError:
            return None

    @property
    def unit(self) -> units.Unit:
        """This receipt's unit of work; a provider's delivery starts an intent."""
        return units.Unit(units.WEBHOOKS, (self.source, self.delivery_id))

    def is_stale(self, current: datetime | None) -> bool:
        """Whether this event is older than the state stamped ``current``."""
        return is_stale(current, self.occurred_at)


def is_stale(current: datetime | None, occurred_at: datetime | None) -> bool:
    """Whether an event at ``occurred_at`` is older than state from ``current``.

    Order by when events happened, not when they arrived: providers deliver
    out of order. Unknown times are never stale, and a tie applies (an equal
    timestamp cannot be ordered, so the later arrival wins).
    """
    if current is None or occurred_at is None:
        return False
    return occurred_at < current


def on(
    source: str, event_type: str, *, steps: bool = False
) -> Callable[[Callable], Callable]:
    """Register the decorated ``handler(event)`` for one source and event type;
    ``steps=True`` for a handler whose outside calls are ``event.step()``."""

    if "*" in event_type:
        # Matched as is, it would never run: its events would be skipped.
        raise ImproperlyConfigured(
            f"@on({source!r}, {event_type!r}): event types have no wildcard. "
            "Register the handler once for each event type it handles."
        )

    def register(handler: Callable) -> Callable:
        callables.refuse_deferred(handler, "Webhook handler")
        _refuse_other_kind(handler, steps)
        handlers = _registry.setdefault((source, event_type), [])
        earlier = [i for i, known in enumerate(handlers) if _redefines(handler, known)]
        if earlier:
            # The newest definition runs, in the place of the first.
            handlers[earlier[0]] = handler
        elif handler not in handlers:
            handlers.append(handler)
        if steps:
            _steps_handlers[id(handler)] = handler
        return handler

    return register


def _redefines(handler: Callable, known: Callable) -> bool:
    """Whether ``handler`` is ``known`` defined again by another run of its
    module: Python runs a module whose import failed partway in full on the
    next import, and its handlers would run twice. Its module and qualified
    name are the same, its module's globals new (closures that one factory
    made share them, and are distinct handlers)."""
    if not (isinstance(handler, FunctionType) and isinstance(known, FunctionType)):
        return False
    return (handler.__module__, handler.__qualname__) == (
        known.__module__,
        known.__qualname__,
    ) and (handler.__globals__ is not known.__globals__)


def _refuse_other_kind(handler: Callable, steps: bool) -> None:
    """A handler is a steps handler for all its event types or for none: its
    kind is kept per handler, so registered plain for one event type and
    with steps for another, it would run as a steps handler for both."""
    registered = any(
        known is handler for handlers in _registry.values() for known in handlers
    )
    if registered and (_steps_handlers.get(id(handler)) is handler) != steps:
        raise ImproperlyConfigured(
            f"{handler!r} is registered with and without steps=True: a handler "
            "runs steps for every event type it handles or for none. Register "
            "a function of its own for each kind."
        )


def runs_steps(handlers: list[Callable]) -> bool:
    """Whether ``handlers`` (one event type's) are steps handlers."""
    kinds = {_steps_handlers.get(id(handler)) is handler for handler in handlers}
    if len(kinds) > 1:
        raise ImproperlyConfigured(
            "An event type's handlers are either all steps handlers (@on(..., "
            "steps=True)) or none: the others need one transaction around "
            f"them, steps need none. Handlers: {handlers!r}."
        )
    return kinds == {True}


def handlers_for(source: str, event_type: str) -> list[Callable]:
    global _discovered
    if not _discovered:
        # Lazy, not in AppConfig.ready(): importing apps' modules is a side
        # effect only processing needs.
        autodiscover_modules("webhooks")
        _discovered = True
    return list(_registry.get((source, event_type), ()))


def stray(configured: Iterable[str]) -> dict[tuple[str, str], list[Callable]]:
    """The registrations ``@on(source, event_type)`` whose source is not one
    of ``configured``: they never run, whatever arrives."""
    handlers_for("", "")  # discovered first
    configured = set(configured)
    return {
        key: list(handlers)
        for key, handlers in _registry.items()
        if key[0] not in configured and handlers
    }


def describe_stray(key: tuple[str, str], handlers: list[Callable]) -> str:
    names = ", ".join(
        f"{getattr(h, '__module__', '?')}.{getattr(h, '__qualname__', repr(h))}"
        for h in handlers
    )
    return (
        f"@on({key[0]!r}, {key[1]!r}) registers {names} for a source "
        "WEBHOOKS['SOURCES'] does not configure"
    )


# Where discovery looks, for the reports of a source no handler is found for.
LOOKED_FOR = (
    "a webhooks.py module of an installed app, imported on first processing "
    "(or a module its AppConfig.ready() imports)"
)


def unhandled(configured: Iterable[str]) -> list[str]:
    """The sources of ``configured`` no handler is registered for, whatever
    the event type: every delivery of theirs is skipped."""
    handlers_for("", "")  # discovered first
    handled = {key[0] for key, handlers in _registry.items() if handlers}
    return [source for source in configured if source not in handled]


def event_types_handled(source: str) -> list[str]:
    """The event types of ``source`` that handlers are registered for."""
    handlers_for("", "")  # discovered first
    return sorted(event_type for (key, event_type) in _registry if key == source)


def run(handler: Callable, event: Event) -> None:
    """Call ``handler(event)``, which must do its work before it returns."""
    callables.run_now("Webhook handler", handler, event)
