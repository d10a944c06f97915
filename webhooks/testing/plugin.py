"""The webhooks kit's fixture, ``once_webhooks``; loaded through the
``django_once`` entry point, it imports nothing until a test asks for it."""

import pytest


@pytest.fixture
def once_webhooks():
    """An ``Intake``: ``once_webhooks.send("stripe", body, event_type=...)``
    signs a delivery with the source's configured secret, POSTs it and runs
    its handlers as a worker would (see ``webhooks.testing.deliveries``)."""
    from webhooks.testing.deliveries import intake

    with intake() as desk:
        yield desk
