"""The demo's own tests: the only ones that import ``project``."""

import pytest


@pytest.fixture(autouse=True)
def demo_urls(settings):
    """The demo's URLs, not the test app's."""
    settings.ROOT_URLCONF = "project.urls"
