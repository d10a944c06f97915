"""The outbox kit's fixture, ``once_events``; loaded through the
``django_once`` entry point, it imports nothing until a test asks for it."""

import pytest


@pytest.fixture
def once_events():
    """The outbox events the test records and commits, as a list of
    ``Message``s (see ``outbox.testing.events.capture_events``)."""
    from outbox.testing.events import capture_events

    with capture_events() as events:
        yield events
