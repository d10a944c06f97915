from datetime import timedelta

import pytest

from idempotency.checks import (
    check_atomic_requests,
    check_schema_class,
    check_settings,
    check_ttls,
)


def ids(settings_value, settings):
    settings.IDEMPOTENCY = settings_value
    return [error.id for error in check_settings()]


def test_defaults_pass(settings):
    assert ids({}, settings) == []


@pytest.mark.parametrize(
    ("value", "error_id"),
    [
        ({"TIMEOUT": 3}, "idempotency.E001"),
        (["TTL"], "idempotency.E001"),
        ({"HEADER": "Idempotency Key"}, "idempotency.E002"),
        ({"HEADER": "Idempotency_Key"}, "idempotency.E002"),
        ({"HEADER": "Idempotency.Key"}, "idempotency.E002"),
        ({"TTL": 0}, "idempotency.E003"),
        ({"TTL": timedelta(seconds=-1)}, "idempotency.E003"),
        ({"TTL": float("inf")}, "idempotency.E003"),
        ({"TTL": timedelta(days=365 * 11)}, "idempotency.E003"),
        ({"TTL": 0.000001}, "idempotency.E003"),
        ({"TTL": 59.9}, "idempotency.E003"),
        ({"WAIT": 0.0001}, "idempotency.E004"),
        ({"LEASE": 0.5}, "idempotency.E005"),
        ({"WAIT": "1s"}, "idempotency.E004"),
        ({"LEASE": True}, "idempotency.E005"),
        ({"SCOPE_RESOLVER": "no.such.resolver"}, "idempotency.E006"),
        ({"STORE_STATUS": "idempotency.responses.REPLAYED_HEADER"}, "idempotency.E007"),
        ({"STORE_STATUS": 5}, "idempotency.E007"),
        ({"REPLAY_HEADERS": "ETag"}, "idempotency.E008"),
        ({"REPLAY_HEADERS": ["ETag", "Set-Cookie"]}, "idempotency.E009"),
        ({"ANONYMOUS_MAX_KEYS": 0}, "idempotency.E010"),
        ({"PROBLEM_BASE_URI": 5}, "idempotency.E011"),
    ],
)
def test_each_bad_setting_has_its_own_error(value, error_id, settings):
    assert ids(value, settings) == [error_id]


def test_every_bad_value_is_reported_in_one_run(settings):
    bad = {"TTL": 0, "WAIT": -1, "STORE_STATUS": 5, "HEADER": "a b"}
    assert sorted(ids(bad, settings)) == [
        "idempotency.E002",
        "idempotency.E003",
        "idempotency.E004",
        "idempotency.E007",
    ]


def test_a_mistyped_dotted_path_shows_the_import_error(settings):
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": "idempotency.scopes.tenant_scop"}
    [error] = check_settings()
    assert "ImportError" in error.hint
    assert "tenant_scop" in error.hint


def test_durations_print_in_seconds(settings):
    settings.IDEMPOTENCY = {"TTL": timedelta(minutes=-2)}
    [error] = check_settings()
    assert "not -120 s" in error.msg


def test_messages_are_short_and_carry_a_hint(settings):
    settings.IDEMPOTENCY = {"TTL": 0, "HEADER": "bad header", "REPLAY_HEADERS": 1}
    for error in check_settings():
        assert len(error.msg) < 80
        assert error.hint


def test_each_floor_is_the_one_documented(settings):
    settings.IDEMPOTENCY = {"TTL": 60, "LEASE": 1, "WAIT": 0.001}
    assert check_settings() == []


def test_a_ttl_shorter_than_lease_plus_wait_is_an_error(settings):
    settings.IDEMPOTENCY = {"TTL": 90, "LEASE": 89.5, "WAIT": 1}
    errors = [error for error in check_ttls() if "IDEMPOTENCY['TTL']" in error.msg]
    [error] = errors
    assert error.id == "idempotency.E013"
    assert "90 s, under LEASE + WAIT (90.5 s)" in error.msg
    assert len(error.msg) < 80
    assert error.hint


def test_a_views_ttl_shorter_than_lease_plus_wait_is_an_error(settings):
    # @idempotent("widget.function", ttl=60) in tests.testapp.views.
    settings.IDEMPOTENCY = {"TTL": 3600, "LEASE": 120}
    [error] = [e for e in check_ttls() if "'widget.function'" in e.msg]
    assert error.id == "idempotency.E013"
    assert "The ttl of 'widget.function' is 60 s" in error.msg


@pytest.mark.parametrize(
    "operation",
    [
        "widget.plain-class",  # a method of Django's own class-based View
        "widget.function.reads",  # an @api_view serving GET and POST
    ],
)
def test_each_decorated_views_ttl_is_checked_once(settings, operation):
    settings.IDEMPOTENCY = {"TTL": 3600, "LEASE": 120}
    [error] = [e for e in check_ttls() if f"'{operation}'" in e.msg]
    assert error.id == "idempotency.E013"


def test_a_steps_views_ttl_longer_than_unit_retention_is_an_error(
    settings, monkeypatch
):
    from tests.testapp import steps_views

    settings.IDEMPOTENCY = {"UNIT_RETENTION": timedelta(days=2)}
    monkeypatch.setattr(steps_views.PaymentView, "idempotency_ttl", 3 * 86400)
    [error] = [e for e in check_ttls() if "PaymentView" in e.msg]
    assert error.id == "idempotency.E016"
    assert "idempotency_ttl is 259200 s, longer than" in error.msg
    assert error.hint


def test_another_modes_ttl_may_outlive_unit_retention(settings, monkeypatch):
    from tests.testapp import views

    settings.IDEMPOTENCY = {"UNIT_RETENTION": timedelta(days=2)}
    monkeypatch.setattr(views.ChargeView, "idempotency_ttl", 3 * 86400)
    assert not [e for e in check_ttls() if "ChargeView" in e.msg]


def test_a_mixins_ttl_under_the_floor_is_an_error(settings, monkeypatch):
    from tests.testapp import views

    monkeypatch.setattr(views.ChargeView, "idempotency_ttl", 0.000001)
    [error] = [e for e in check_ttls() if "ChargeView" in e.msg]
    assert error.id == "idempotency.E003"
    assert "ChargeView.idempotency_ttl must be at least 60 s" in error.msg


def test_the_ttls_pass_by_default(settings):
    settings.IDEMPOTENCY = {}
    assert check_ttls() == []


def test_a_schema_class_without_the_contract_is_a_warning(settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    }
    warnings = check_schema_class()
    assert {w.id for w in warnings} == {"idempotency.W002"}
    names = {w.obj.__name__ for w in warnings}
    # The mixin's views and an APIView with an @idempotent method. (An
    # @api_view class keeps the schema of the setting when it was imported.)
    assert {"WidgetViewSet", "ChargeView", "DecoratedMethodView"} <= names
    assert all(len(w.msg) < 80 and w.hint for w in warnings)


def test_the_idempotent_schema_class_passes(settings):
    assert settings.REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] == (
        "idempotency.openapi.AutoSchema"
    )
    assert check_schema_class() == []


def test_a_steps_view_under_atomic_requests_is_an_error(monkeypatch):
    from django.db import connection

    assert check_atomic_requests() == []  # ATOMIC_REQUESTS off
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    errors = check_atomic_requests()
    [error] = [e for e in errors if "steps_views.PaymentView" in e.msg]
    assert error.id == "idempotency.E015"
    assert "PaymentView runs its steps inside ATOMIC_REQUESTS" in error.msg
    assert "non_atomic_requests" in error.hint


def test_a_steps_method_of_a_django_class_based_view_is_found(monkeypatch):
    from dataclasses import replace

    from django.db import connection

    from idempotency.claims import STEPS
    from tests.testapp.views import PlainClassView

    policy = replace(PlainClassView.post.idempotency_policy, mode=STEPS)
    monkeypatch.setattr(PlainClassView.post, "idempotency_policy", policy)
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    [error] = [e for e in check_atomic_requests() if "PlainClassView" in e.msg]
    assert error.msg.startswith("tests.testapp.views.PlainClassView runs its steps")


def test_a_non_atomic_steps_view_passes_under_atomic_requests(monkeypatch):
    from django.db import connection
    from django.urls import resolve

    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    view = resolve("/t/payment/").func
    monkeypatch.setattr(view, "_non_atomic_requests", {"default"}, raising=False)
    assert not [e for e in check_atomic_requests() if "steps_views" in e.msg]
