"""The settings objects: defaults, reloads, and refusal at first use."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from idempotency.conf import idempotency_settings
from idempotency.shared import settings as conf
from idempotency.shared.settings import AppSettings, Option, as_timedelta


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


def test_seconds_become_timedeltas(settings):
    settings.IDEMPOTENCY = {"TTL": 90}
    assert timedelta(seconds=90) == idempotency_settings.TTL


def test_unknown_keys_raise(settings):
    settings.IDEMPOTENCY = {"HEADDER": "X"}
    with pytest.raises(ImproperlyConfigured, match="HEADDER"):
        idempotency_settings.HEADER  # noqa: B018


@pytest.mark.parametrize(
    "value",
    [
        {"TTL": 0},
        {"TTL": -5},
        {"TTL": float("inf")},
        {"TTL": float("nan")},
        {"TTL": timedelta(days=4000)},
        {"WAIT": 0},
        {"LEASE": timedelta(0)},
        {"STORE_STATUS": 5},
        {"SCOPE_RESOLVER": "no.such.resolver"},
        {"PROBLEM_BASE_URI": 5},
        ["TTL"],
        "TTL=0",
    ],
)
def test_a_value_that_switches_a_guarantee_off_is_refused_at_first_use(value, settings):
    # No system check ran: this is what gunicorn sees on its first request.
    settings.IDEMPOTENCY = value
    with pytest.raises(ImproperlyConfigured, match="refuses this configuration"):
        idempotency_settings.TTL  # noqa: B018


def test_the_refusal_names_every_bad_value(settings):
    settings.IDEMPOTENCY = {"TTL": 0, "WAIT": "1s", "STORE_STATUS": 5}
    with pytest.raises(ImproperlyConfigured) as raised:
        idempotency_settings.HEADER  # noqa: B018
    message = str(raised.value)
    assert "['TTL'] must be more than 0 s, not 0 s" in message
    assert "['WAIT'] must be seconds or a timedelta" in message
    assert "['STORE_STATUS'] must be a callable" in message


def test_a_refused_configuration_stays_refused_until_it_changes(settings):
    settings.IDEMPOTENCY = {"TTL": 0}
    for _ in range(2):
        with pytest.raises(ImproperlyConfigured):
            idempotency_settings.TTL  # noqa: B018
    settings.IDEMPOTENCY = {"TTL": 60}
    assert timedelta(seconds=60) == idempotency_settings.TTL


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError):
        AppSettings("NOPE", {"A": Option(1, int, "x.E001")}, shape_id="x.E001").B  # noqa: B018


def test_as_timedelta():
    assert as_timedelta(5) == timedelta(seconds=5)
    assert as_timedelta(timedelta(minutes=1)) == timedelta(minutes=1)
    with pytest.raises(TypeError):
        as_timedelta("5")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, timedelta(seconds=1)),
        (0.5, timedelta(seconds=0.5)),
        (timedelta(days=3653), timedelta(days=3653)),
    ],
)
def test_duration_accepts(value, expected):
    assert conf.duration(value) == expected


@pytest.mark.parametrize(
    "value", [0, -1, True, "1", None, float("inf"), 10**12, timedelta(days=3654)]
)
def test_duration_refuses(value):
    with pytest.raises(conf.InvalidSetting):
        conf.duration(value)


def test_a_bad_dotted_path_shows_the_import_error():
    with pytest.raises(conf.InvalidSetting) as raised:
        conf.dotted_callable("idempotency.scopes.nope")
    assert "ImportError" in raised.value.hint
    assert "nope" in raised.value.hint


def test_a_bare_string_is_not_a_list_of_strings():
    with pytest.raises(conf.InvalidSetting, match="list of strings"):
        conf.string_list("ETag")


@pytest.mark.django_db
@pytest.mark.parametrize("ttl", [0, -1, float("nan")])
def test_a_server_started_without_check_refuses_keyed_requests_with_ttl_0(
    api, settings, ttl
):
    from tests.testapp.models import Widget

    settings.IDEMPOTENCY = {"TTL": ttl}
    api.client.raise_request_exception = False
    for _ in range(2):
        response = api.post("/t/widgets/", {"name": "a"}, key="k1")
        assert response.status_code == 500
    # Refused, never run unguarded: no widget, let alone two.
    assert not Widget.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("configured", "path"),
    [
        # The reproduction: this TTL made two widgets for one key.
        ({"TTL": 0.000001}, "/t/widgets/"),
        ({"TTL": 120, "LEASE": 119.5}, "/t/widgets/"),
        # The view's own ttl=60, under LEASE + WAIT.
        ({"LEASE": 60}, "/t/function/"),
    ],
)
def test_a_ttl_a_retry_could_outrun_is_refused_at_the_first_keyed_request(
    api, settings, configured, path
):
    from tests.testapp.models import Widget

    settings.IDEMPOTENCY = configured
    api.client.raise_request_exception = False
    for _ in range(2):
        assert api.post(path, {"name": "a"}, key="k1").status_code == 500
    assert not Widget.objects.exists()


@pytest.mark.django_db
def test_a_wait_past_the_databases_lock_timeout_is_refused_by_name(api, settings):
    # PostgreSQL's lock_timeout holds at most 2,147,483,647 ms: a WAIT of 30
    # days passed the check, then every keyed request failed in the database
    # (DataError: invalid value for parameter "lock_timeout").
    from idempotency.checks import check_settings

    settings.IDEMPOTENCY = {"WAIT": timedelta(days=30), "TTL": timedelta(days=60)}

    assert [error.id for error in check_settings()] == ["idempotency.E004"]
    with pytest.raises(ImproperlyConfigured, match=r"\['WAIT'\]"):
        api.post("/t/widgets/", {"name": "a"}, key="k1")
