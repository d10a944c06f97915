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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A kit's failure reads as its message and the user's frame (``-v``:
    pytest's whole report)."""
    report = yield
    if report.failed and call.excinfo is not None:
        from idempotency.shared.testing.reports import shorten

        shorten(item, report, call.excinfo)
    return report
