"""The kits' shared fixtures: the ``once`` marker and ``once_clock``.

Loaded through ``idempotency.testing.plugin`` (the ``pytest11`` entry
point); imports nothing but pytest until a test asks for a fixture.
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "once: a django-once proof kit case (every kit's suites carry it)",
    )


@pytest.fixture
def once_clock():
    """The apps' clock (``idempotency.shared.clock``), moved without sleeping:
    ``once_clock.advance(hours=25)``; the real one comes back after the test."""
    from idempotency.shared.testing.clock import controlled_clock

    with controlled_clock() as control:
        yield control
