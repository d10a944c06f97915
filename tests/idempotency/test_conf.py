from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from idempotency.conf import AppSettings, as_timedelta, idempotency_settings


def test_defaults_apply(settings):
    settings.IDEMPOTENCY = {}
    assert idempotency_settings.HEADER == "Idempotency-Key"
    assert timedelta(hours=24) == idempotency_settings.TTL


def test_values_reload_when_the_setting_changes(settings):
    settings.IDEMPOTENCY = {"HEADER": "X-Key"}
    assert idempotency_settings.HEADER == "X-Key"
    settings.IDEMPOTENCY = {}
    assert idempotency_settings.HEADER == "Idempotency-Key"


def test_dotted_paths_are_imported(settings):
    from idempotency.scopes import default_scope

    settings.IDEMPOTENCY = {}
    assert idempotency_settings.SCOPE_RESOLVER is default_scope


def test_unknown_keys_raise(settings):
    settings.IDEMPOTENCY = {"HEADDER": "X"}
    with pytest.raises(ImproperlyConfigured, match="HEADDER"):
        idempotency_settings.HEADER  # noqa: B018


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError):
        AppSettings("NOPE", {"A": 1}).B  # noqa: B018


def test_as_timedelta():
    assert as_timedelta(5) == timedelta(seconds=5)
    assert as_timedelta(timedelta(minutes=1)) == timedelta(minutes=1)
    with pytest.raises(TypeError):
        as_timedelta("5")
