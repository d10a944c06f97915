"""The four apps' AppConfigs: what each declares is what ``ready()`` wired."""

import pytest
from django.apps import apps
from django.core.checks import Tags, registry
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from idempotency.shared.appconfig import OnceAppConfig

APPS = {
    "idempotency": "idempotency.apps.IdempotencyConfig",
    "outbox": "outbox.apps.OutboxConfig",
    "inbox": "inbox.apps.InboxConfig",
    "webhooks": "webhooks.apps.WebhooksConfig",
}
CONFIGS = [pytest.param(label, id=label) for label in APPS]


@pytest.mark.parametrize("label", CONFIGS)
def test_django_picks_each_apps_own_config_not_the_shared_base(label):
    config = apps.get_app_config(label)
    assert type(config) is import_string(APPS[label])
    assert isinstance(config, OnceAppConfig)


@pytest.mark.parametrize("label", CONFIGS)
def test_every_declared_check_is_registered_with_its_tags(label):
    config = apps.get_app_config(label)
    registered = registry.registry.registered_checks
    for path in config.system_checks:
        assert import_string(path) in registered, path
    for path in config.url_checks:
        check = import_string(path)
        assert check in registered and Tags.urls in check.tags, path
    for path in config.deploy_checks:
        assert import_string(path) in registry.registry.deployment_checks, path


@pytest.mark.parametrize("label", CONFIGS)
def test_every_settings_object_forgets_its_values_when_its_setting_changes(
    label, settings
):
    for path in apps.get_app_config(label).settings_objects:
        settings_object = import_string(path)
        settings_object.merged()  # read: the values are cached
        setattr(settings, settings_object.namespace, {})
        assert settings_object._values is None, path


def test_the_webhooks_caches_are_connected_to_setting_changed():
    receivers = {lookup_key[0] for lookup_key, *_ in setting_changed.receivers}
    declared = apps.get_app_config("webhooks").setting_receivers
    assert declared and set(declared) <= receivers
