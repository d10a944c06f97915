"""The demo's settings pass the apps' checks."""

from project import settings as demo_settings
from webhooks.checks import check_settings, check_unhandled_sources


def test_the_demo_webhook_sources_pass(settings):
    settings.WEBHOOKS = demo_settings.WEBHOOKS
    assert check_settings() == []
    assert sorted(settings.WEBHOOKS["SOURCES"]) == ["github", "standard", "stripe"]


def test_every_demo_source_has_a_handler(settings):
    # Without one, the demo's own check and runserver warn webhooks.W005.
    settings.WEBHOOKS = demo_settings.WEBHOOKS
    assert check_unhandled_sources() == []
