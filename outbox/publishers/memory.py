"""A publisher that keeps messages in memory, for tests."""

import threading
from dataclasses import dataclass

from ..exceptions import OutboxConfigurationError, PublishError
from .base import BasePublisher, envelope


@dataclass(frozen=True)
class SentMessage:
    id: str
    type: str
    aggregate_type: str
    aggregate_id: str
    payload: object
    headers: dict
    attempts: int


class InMemoryPublisher(BasePublisher):
    """Keep published messages in ``InMemoryPublisher.sent``, for tests (in the
    spirit of ``django.core.mail.outbox``). ``InMemoryPublisher.reset()`` empties
    it; setting ``InMemoryPublisher.failing = True`` makes every publish fail.

    It marks events published that no consumer will ever see, so it refuses to
    be made unless the settings say this is a test run:
    ``allow_in_memory=True``. ``check --deploy`` names it (outbox.E010).
    """

    sent: list[SentMessage] = []
    failing = False
    _lock = threading.Lock()

    def __init__(self, *, allow_in_memory: bool = False):
        if allow_in_memory is not True:
            raise OutboxConfigurationError(
                "InMemoryPublisher keeps events in one process's memory, where "
                "no consumer sees them, and reports them published. It is for "
                "tests: in the test settings, set OUTBOX['PUBLISHER_OPTIONS'] = "
                "{'allow_in_memory': True}."
            )

    @classmethod
    def reset(cls):
        with cls._lock:
            cls.sent.clear()
            cls.failing = False

    def publish(self, message):
        if self.failing:
            raise PublishError(f"InMemoryPublisher.failing is set ({message.id}).")
        payload, headers = envelope(message)
        with self._lock:
            self.sent.append(
                SentMessage(
                    id=str(message.id),
                    type=message.type,
                    aggregate_type=message.aggregatetype,
                    aggregate_id=message.aggregateid,
                    payload=payload,
                    headers=headers,
                    attempts=message.attempts,
                )
            )
