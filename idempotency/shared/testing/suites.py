"""What every kit's suite shares: the ``once`` marker, committed transactions
and the messages for a subclass that forgot something."""

import dataclasses
import inspect
from typing import Any

import pytest


class Suite:
    """The base of ``EndpointSuite``, ``ConsumerSuite`` and ``WebhookSuite``."""

    pytestmark = [pytest.mark.once]

    @pytest.fixture(autouse=True)
    def _once_committed_transactions(self, transactional_db):
        """Every case commits for real: races, crashes and replays need it."""

    def effects(self) -> Any:
        """A number that grows with the business effect under test."""
        raise NotImplementedError(
            f"{type(self).__name__} must define effects(), returning a number "
            "that grows with the business effect (e.g. Order.objects.count())."
        )

    def _required(self, name: str):
        try:
            return inspect.getattr_static(type(self), name)
        except AttributeError:
            raise NotImplementedError(
                f"{type(self).__name__} must set {name}."
            ) from None

    def _subject(self, kind: type, **given) -> Any:
        """What the checks drive: ``kind``, a kit's dataclass, with each field
        the suite's attribute of the same name unless ``given``."""
        values = {}
        for field in dataclasses.fields(kind):
            if field.name in given:
                continue
            if field.default is field.default_factory is dataclasses.MISSING:
                self._required(field.name)
            values[field.name] = getattr(self, field.name)
        return kind(**values, **given)
