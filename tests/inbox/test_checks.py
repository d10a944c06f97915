"""One test per system check id of the inbox."""

from datetime import timedelta

import pytest
from django.test.utils import override_settings

from inbox import checks


def ids(messages):
    return [m.id for m in messages]


def test_the_defaults_pass():
    assert checks.check_settings() == []


@override_settings(INBOX={"RETENTON": 1})
def test_e001_unknown_setting():
    assert ids(checks.check_settings()) == ["inbox.E001"]


@override_settings(INBOX={"RETENTION": "30 days"})
def test_e002_durations_must_be_durations():
    assert ids(checks.check_settings()) == ["inbox.E002"]


@override_settings(INBOX={"RETENTION": 0, "REDELIVERY_HORIZON": "7d"})
def test_every_bad_duration_is_reported():
    assert ids(checks.check_settings()) == ["inbox.E002", "inbox.E002"]


@override_settings(INBOX={"RETENTION": 0})
def test_receive_refuses_a_retention_that_would_forget_at_once():
    from django.core.exceptions import ImproperlyConfigured

    from inbox.conf import inbox_settings

    with pytest.raises(ImproperlyConfigured, match="RETENTION"):
        inbox_settings.RETENTION  # noqa: B018


@override_settings(INBOX={"RETENTION": timedelta(days=1)})
def test_e004_retention_shorter_than_the_redelivery_horizon():
    assert ids(checks.check_settings()) == ["inbox.E004"]


@override_settings(
    INBOX={"RETENTION": timedelta(days=1), "REDELIVERY_HORIZON": timedelta(hours=12)}
)
def test_a_short_retention_is_accepted_with_a_horizon_to_match():
    assert ids(checks.check_settings()) == []


def test_e004_counts_the_broker_visibility_timeout():
    from project.celery import app

    saved = app.conf.broker_transport_options
    app.conf.broker_transport_options = {"visibility_timeout": 60 * 24 * 3600}
    try:
        assert ids(checks.check_settings()) == ["inbox.E004"]  # 60 d > 30 d
    finally:
        app.conf.broker_transport_options = saved


@override_settings(INBOX={"RETENTION": timedelta(days=40)})
def test_e004_names_the_visibility_timeout_when_it_is_the_bound():
    from project.celery import app

    saved = app.conf.broker_transport_options
    app.conf.broker_transport_options = {"visibility_timeout": 60 * 24 * 3600}
    try:
        [error] = checks.check_settings()
    finally:
        app.conf.broker_transport_options = saved
    assert "visibility_timeout (5184000 s)" in error.msg
    assert "REDELIVERY_HORIZON" not in error.msg
