"""The demo's settings pass the apps' checks."""

from project import settings as demo_settings
from webhooks.checks import check_settings


def test_the_demo_webhook_sources_pass(settings):
    settings.WEBHOOKS = demo_settings.WEBHOOKS
    assert check_settings() == []
    assert sorted(settings.WEBHOOKS["SOURCES"]) == ["github", "standard", "stripe"]
