"""What every kit's suite shares: the ``once`` marker, committed transactions
and the messages for a subclass that forgot something."""

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
