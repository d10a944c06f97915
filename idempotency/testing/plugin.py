"""The proof kit's pytest plugin, registered through the ``pytest11`` entry point.

It registers the ``once`` marker and three fixtures. Loading it imports
nothing but pytest: every fixture imports the kit (and Django) only when a
test asks for it, so projects that never use the kit pay nothing for it.
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "once: a django-once proof kit case (the suites in "
        "idempotency.testing.suites carry it)",
    )


@pytest.fixture
def once_clock():
    """The apps' clock (``idempotency.shared.clock``), moved without sleeping:
    ``once_clock.advance(hours=25)``; the real one comes back after the test."""
    from idempotency.testing.clock import controlled_clock

    with controlled_clock() as control:
        yield control


@pytest.fixture
def once_events():
    """The outbox events the test records and commits, as a list of
    ``Message``s (see ``idempotency.testing.events.capture_events``)."""
    from idempotency.testing.events import capture_events

    with capture_events() as events:
        yield events


@pytest.fixture
def once_webhooks():
    """An ``Intake``: ``once_webhooks.send("stripe", body, event_type=...)``
    signs a delivery with the source's configured secret, POSTs it and runs
    its handlers as a worker would (see ``idempotency.testing.deliveries``)."""
    from idempotency.testing.deliveries import intake

    with intake() as desk:
        yield desk
