"""Listening to every signal the apps send, as a receiver in a project would."""

import logging
from contextlib import contextmanager

from django.dispatch import Signal

import idempotency.shared.signals
import idempotency.signals
import inbox.signals
import outbox.signals
import webhooks.signals

MODULES = (
    idempotency.shared.signals,
    idempotency.signals,
    outbox.signals,
    inbox.signals,
    webhooks.signals,
)
# Every signal by its name, e.g. "key_claimed".
SIGNALS = {
    name: value
    for module in MODULES
    for name, value in vars(module).items()
    if isinstance(value, Signal)
}
NAMES = {signal: name for name, signal in SIGNALS.items()}
# The app loggers a decision is logged on, and the shared core's.
LOGGERS = ("idempotency", "outbox", "inbox", "webhooks")


class ReceiverFailed(Exception):
    """What a broken receiver raises."""


class Heard(list):
    """(signal name, kwargs) in the order the receivers got them."""

    def names(self) -> list[str]:
        return [name for name, _kwargs in self]

    def of(self, name: str) -> list[dict]:
        return [kwargs for each, kwargs in self if each == name]


@contextmanager
def listening(*, raising=False, asynchronous=False):
    """Connect one receiver to every signal; yield what it heard.

    ``raising``: it raises after noting each signal (a broken receiver).
    ``asynchronous``: it is an ``async def`` receiver.
    """
    heard = Heard()

    def note(signal, kwargs):
        heard.append((NAMES[signal], kwargs))
        if raising:
            raise ReceiverFailed(NAMES[signal])

    def receiver(signal, sender, **kwargs):
        note(signal, kwargs)

    async def async_receiver(signal, sender, **kwargs):
        note(signal, kwargs)

    chosen = async_receiver if asynchronous else receiver
    for signal in SIGNALS.values():
        signal.connect(chosen, weak=False)
    try:
        yield heard
    finally:
        for signal in SIGNALS.values():
            signal.disconnect(chosen)


def receiver_errors(caplog) -> list[logging.LogRecord]:
    """The log records saying a receiver raised (and the decision stood)."""
    return [
        record
        for record in caplog.records
        if record.name == "idempotency.signals"
        and record.exc_info
        and isinstance(record.exc_info[1], ReceiverFailed)
    ]
