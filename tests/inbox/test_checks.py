"""One test per system check id of the inbox."""

from datetime import timedelta

import pytest
from django.test.utils import override_settings

from inbox import checks
from tests.servers import AMQP_URL, INBOX_REDIS_URL


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
    from tests.celery import app

    saved = app.conf.broker_transport_options
    app.conf.broker_transport_options = {"visibility_timeout": 60 * 24 * 3600}
    try:
        assert ids(checks.check_settings()) == ["inbox.E004"]  # 60 d > 30 d
    finally:
        app.conf.broker_transport_options = saved


@override_settings(INBOX={"RETENTION": timedelta(days=40)})
def test_e004_names_the_visibility_timeout_when_it_is_the_bound():
    from tests.celery import app

    saved = app.conf.broker_transport_options
    app.conf.broker_transport_options = {"visibility_timeout": 60 * 24 * 3600}
    try:
        [error] = checks.check_settings()
    finally:
        app.conf.broker_transport_options = saved
    assert "visibility_timeout (5184000 s)" in error.msg
    assert "REDELIVERY_HORIZON" not in error.msg


@pytest.mark.parametrize("name", ["RETENTION", "REDELIVERY_HORIZON"])
@pytest.mark.parametrize("value", [0.5, timedelta(minutes=59)])
def test_e002_a_duration_under_the_hour_floor_is_refused(name, value):
    from django.core.exceptions import ImproperlyConfigured

    from inbox.conf import inbox_settings

    with override_settings(
        INBOX={"RETENTION": 0.5, "REDELIVERY_HORIZON": 0.5} | {name: value}
    ):
        assert "inbox.E002" in ids(checks.check_settings())
        with pytest.raises(
            ImproperlyConfigured, match=rf"INBOX\['{name}'\].*at least 3600 s"
        ):
            inbox_settings.RETENTION  # noqa: B018


@override_settings(INBOX={"RETENTION": 3600, "REDELIVERY_HORIZON": 3600})
def test_an_hour_is_the_floor_itself():
    assert ids(checks.check_settings()) == []


@override_settings(INBOX={"MAX_ATTEMPTS": 0})
def test_e005_attempts_must_be_a_positive_count():
    assert ids(checks.check_settings()) == ["inbox.E005"]


@override_settings(
    INBOX={
        "RETENTION": timedelta(days=1),
        "REDELIVERY_HORIZON": timedelta(hours=1),
        "MAX_ATTEMPTS": 50,
        "RETRY_BACKOFF_MAX": timedelta(hours=1),
    }
)
def test_e004_counts_the_retries_times_their_backoff_cap():
    [error] = checks.check_settings()
    assert error.id == "inbox.E004"
    assert "RETRY_BACKOFF_MAX (176400 s)" in error.msg


@pytest.mark.parametrize(
    ("broker", "timeout"),
    [(INBOX_REDIS_URL, 3600), (AMQP_URL, 0)],
)
def test_an_unset_visibility_timeout_is_the_transports_default(broker, timeout):
    from inbox.conf import visibility_timeout
    from tests.celery import app

    saved = app.conf.broker_url, app.conf.broker_transport_options
    app.conf.broker_url, app.conf.broker_transport_options = broker, {}
    try:
        assert visibility_timeout() == timedelta(seconds=timeout)
    finally:
        app.conf.broker_url, app.conf.broker_transport_options = saved


@pytest.mark.parametrize(
    "broker", ["reddis://localhost:6379/0", "redis://localhost:notaport/0"]
)
def test_a_broker_url_kombu_cannot_read_leaves_the_check_and_the_purge_running(
    broker,
):
    # Kombu's KeyError ("No such transport") or ValueError crashed the check
    # and, through the retention it checks, purge_idempotency. Celery reports
    # the URL where it connects; the checks go on without its default.
    from inbox.conf import checked_retention
    from tests.celery import app

    saved = app.conf.broker_url, app.conf.broker_transport_options
    app.conf.broker_url, app.conf.broker_transport_options = broker, {}
    try:
        assert checks.check_settings() == []
        assert checked_retention() == timedelta(days=30)
    finally:
        app.conf.broker_url, app.conf.broker_transport_options = saved


def test_e006_a_consumer_task_without_the_inbox_wiring(consumer_tasks):
    from celery import shared_task

    from inbox.api import ConsumerTask, consumer, consumer_task

    @shared_task(name="checks.acked_away", acks_late=True)
    @consumer("checks.acked-away")
    def acked_away(**kwargs): ...

    @shared_task(
        name="checks.acks_failures", base=ConsumerTask, acks_on_failure_or_timeout=True
    )
    @consumer("checks.acks-failures")
    def acks_failures(**kwargs): ...

    @consumer_task("checks.wired", name="checks.wired")
    def wired(**kwargs): ...

    @shared_task(name="checks.not_a_consumer")
    def not_a_consumer(**kwargs): ...

    errors = checks.check_consumer_tasks()

    assert ids(errors) == ["inbox.E006", "inbox.E006"]
    assert errors[0].msg == (
        "Celery task 'checks.acked_away' runs an @consumer without base="
        "ConsumerTask (retries, then a dead row), acks_on_failure_or_timeout=False."
    )
    assert "'checks.acks_failures'" in errors[1].msg
    assert errors[1].msg.endswith("without acks_on_failure_or_timeout=False.")


@pytest.mark.parametrize(
    ("options", "missing"),
    [
        # Celery's max_retries raises the consumer's error once used up, before
        # INBOX["MAX_ATTEMPTS"]: the message was requeued at once, run again
        # without backoff until the redeliveries counted it dead as a dead
        # worker.
        (
            {"max_retries": 2},
            "max_retries=None (INBOX['MAX_ATTEMPTS'] bounds its runs)",
        ),
        # autoretry_for retries for ever (ConsumerTask's max_retries is None):
        # the message is never dead.
        (
            {"autoretry_for": (Exception,)},
            "autoretry_for (ConsumerTask retries, then buries the message)",
        ),
    ],
)
def test_e006_a_consumer_task_with_celerys_own_retries(
    consumer_tasks, options, missing
):
    from inbox.api import consumer_task

    @consumer_task("checks.own-retries", name="checks.own_retries", **options)
    def own_retries(**kwargs): ...

    errors = checks.check_consumer_tasks()

    assert ids(errors) == ["inbox.E006"]
    assert errors[0].msg == (
        f"Celery task 'checks.own_retries' runs an @consumer without {missing}."
    )


def test_a_worker_is_stopped_by_e006_unless_the_project_silenced_it(
    consumer_tasks, settings
):
    from celery import shared_task

    from inbox.api import consumer

    @shared_task(name="checks.stops_a_worker", acks_late=True)
    @consumer("checks.stops-a-worker")
    def stops_a_worker(**kwargs): ...

    with pytest.raises(SystemExit, match=r"inbox\.E006: .*'checks\.stops_a_worker'"):
        checks.refuse_unwired_consumers()
    # The project's own wiring, which the check cannot see, is its call.
    settings.SILENCED_SYSTEM_CHECKS = ["inbox.E006"]
    checks.refuse_unwired_consumers()


def test_the_installed_consumer_tasks_are_wired():
    assert checks.check_consumer_tasks() == []


def test_a_steps_lease_under_a_second_is_refused_at_first_use():
    from django.core.exceptions import ImproperlyConfigured

    from inbox.conf import inbox_settings

    with override_settings(INBOX={"STEPS_LEASE": 0.5}):
        assert "inbox.E002" in ids(checks.check_settings())
        with pytest.raises(ImproperlyConfigured, match=r"STEPS_LEASE.*at least 1 s"):
            inbox_settings.STEPS_LEASE  # noqa: B018
