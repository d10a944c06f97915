"""The /metrics view, and the gauges registered into a project's own registry."""

import threading

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError, connection, transaction
from django.test import override_settings
from prometheus_client import CollectorRegistry, Counter, generate_latest

from idempotency.metrics import keys
from idempotency.models import IdempotencyRecord
from idempotency.prometheus.collector import register

from .scraping import METRICS_ON, samples, scrape, value
from .seeds import seed

pytestmark = pytest.mark.django_db


def test_metrics_off_the_view_is_not_found(client):
    assert client.get("/metrics").status_code == 404


@pytest.mark.parametrize("value", ["yes", 1])
def test_a_switch_that_is_not_a_boolean_is_refused_not_reported_off(value, client):
    """A scraper must not be told "metrics are off: METRICS is False" for a
    switch set to something else: it is refused at first use, naming it."""
    with (
        override_settings(IDEMPOTENCY={"METRICS": value}),
        pytest.raises(ImproperlyConfigured, match="METRICS"),
    ):
        client.get("/metrics")


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_the_view_serves_the_gauges_read_from_the_database(client):
    seed()

    scraped = scrape(client)

    assert value(scraped, "once_keys_stuck_leases") == 2
    assert value(scraped, "once_outbox_dead") == 1
    assert value(scraped, "once_outbox_oldest_pending_age_seconds") >= 400
    assert value(scraped, "once_inbox_dead_messages") == 2
    assert value(scraped, "once_webhooks_receipts_failed", source="github") == 1


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_the_view_answers_openmetrics_to_a_scraper_that_asks_for_it(client):
    answer = client.get("/metrics", headers={"Accept": "application/openmetrics-text"})

    assert answer["Content-Type"].startswith("application/openmetrics-text")
    assert answer.content.endswith(b"# EOF\n")


@override_settings(IDEMPOTENCY=METRICS_ON)
@pytest.mark.parametrize(
    "accept",
    ["application/openmetrics-text; version=abc", "text/plain; version=1..0"],
)
def test_an_unreadable_version_in_accept_answers_the_text_format(client, accept):
    # prometheus-client's choose_encoder() raises on it: whoever reaches the
    # view made a 500 per request, each logged as an error (mailed to ADMINS).
    answer = client.get("/metrics", headers={"Accept": accept})

    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"once_outbox_events_total" in answer.content


def test_a_site_wide_cache_never_answers_a_scrape_with_an_old_one(client):
    # Django's per-site cache keeps a GET's 200 for CACHE_MIDDLEWARE_SECONDS:
    # every scrape would read the counters and gauges of the first.
    cached = override_settings(
        IDEMPOTENCY=METRICS_ON,
        MIDDLEWARE=[
            "django.middleware.cache.UpdateCacheMiddleware",
            *settings.MIDDLEWARE,
            "django.middleware.cache.FetchFromCacheMiddleware",
        ],
        CACHE_MIDDLEWARE_KEY_PREFIX="test-scrape-cache",
    )
    labels = {"operation": "tests.cache", "mode": "atomic", "outcome": "claimed"}
    with cached:
        before = value(scrape(client), "once_keys_total", **labels, reason="")
        keys.labels(*labels.values(), "").inc()

        after = value(scrape(client), "once_keys_total", **labels, reason="")

    assert after == before + 1


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_registry_the_project_serves_gets_the_gauges_once():
    # django-prometheus serves prometheus_client's default registry: the
    # project registers the gauges there instead of adding an endpoint.
    registry = CollectorRegistry()
    seed()

    register(registry)
    register(registry)

    scraped = samples(generate_latest(registry).decode())
    assert value(scraped, "once_outbox_backlog") == 3
    families = generate_latest(registry).decode().count("# TYPE once_outbox_backlog ")
    assert families == 1


def refuse_every_query(execute, sql, params, many, context):
    # What a failover or a lost connection does to the scrape's queries.
    raise OperationalError("the database is unreachable")


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_database_outage_leaves_the_counters_scraped_and_the_gauges_out(
    client, caplog
):
    """The gauges' queries failing must not fail the scrape: the counters, a
    project's own metrics beside them, are what shows the outage."""
    keys.labels("tests.outage", "atomic", "claimed", "").inc()

    with connection.execute_wrapper(refuse_every_query):
        scraped = scrape(client)

    labels = {"operation": "tests.outage", "mode": "atomic", "outcome": "claimed"}
    assert value(scraped, "once_keys_total", **labels, reason="") >= 1
    assert not any(name.startswith("once_outbox_backlog") for name, _ in scraped)
    assert "gauges" in caplog.text


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_database_outage_never_breaks_a_registry_the_project_serves():
    # django-prometheus serves the default registry: every metric it has
    # would be lost with ours.
    registry = CollectorRegistry()
    register(registry)
    theirs = Counter("project_requests", "The project's own.", registry=registry)
    theirs.inc()

    with connection.execute_wrapper(refuse_every_query):
        scraped = samples(generate_latest(registry).decode())

    assert value(scraped, "project_requests_total") == 1


@override_settings(IDEMPOTENCY=METRICS_ON, WEBHOOKS={"SOURCES": "github"})
def test_a_refused_setting_of_one_app_never_breaks_a_registry_the_project_serves(
    caplog,
):
    # Refused at first use (the intake answers 500, naming it): the scrape
    # must still serve the project's metrics, and the other apps' gauges.
    registry = CollectorRegistry()
    register(registry)
    theirs = Counter("project_requests", "The project's own.", registry=registry)
    theirs.inc()

    scraped = samples(generate_latest(registry).decode())

    assert value(scraped, "project_requests_total") == 1
    assert ("once_outbox_backlog", ()) in scraped
    assert not any(name.startswith("once_webhooks_receipts") for name, _ in scraped)
    assert "webhooks.E002" in caplog.text


def fail_the_first_query():
    """A wrapper whose first query of the keys' gauges fails in the database
    itself (a statement timeout, say): PostgreSQL aborts the transaction it
    ran in. Only theirs: whatever else a scrape queries first (a connection's
    setup, another test's leftovers) must not take the failure instead."""
    failed = []
    records = IdempotencyRecord._meta.db_table

    def wrapper(execute, sql, params, many, context):
        if not failed and records in sql:
            failed.append(sql)
            return execute("SELECT 1 / 0", None, many, context)
        return execute(sql, params, many, context)

    return wrapper


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY=METRICS_ON)
def test_one_failing_gauge_leaves_the_others_scraped_under_atomic_requests(
    client, monkeypatch, caplog
):
    # In the request's transaction, every gauge read after the failed query
    # would meet "current transaction is aborted" and be left out too.
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    seed()

    with connection.execute_wrapper(fail_the_first_query()):
        scraped = scrape(client)

    assert caplog.text.count("Could not read the gauges") == 1
    assert value(scraped, "once_outbox_dead") == 1
    assert value(scraped, "once_inbox_dead_messages") == 2
    assert value(scraped, "once_webhooks_receipts_failed", source="github") == 1


def statement_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


def hold_the_keys_table(locked, release):
    """What a migration's ALTER TABLE (or a VACUUM FULL) does to the gauges'
    reads: every query of the table waits for its lock."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            table = connection.ops.quote_name(IdempotencyRecord._meta.db_table)
            cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            locked.set()
            # Generous: without a bound of their own, the gauges' reads end
            # only when this lets go.
            release.wait(60)
    finally:
        connection.close()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_table_locked_leaves_its_gauges_out_and_the_scrape_answers(client, caplog):
    seed()
    timeout_before = statement_timeout()
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_the_keys_table, args=(locked, release))
    holder.start()
    try:
        assert locked.wait(10)
        scraped = scrape(client)
        # Answered while the lock is still held: the keys' reads gave up.
        assert holder.is_alive() and not release.is_set()
    finally:
        release.set()
        holder.join()

    assert caplog.text.count("Could not read the gauges") == 1
    assert not any(name.startswith("once_keys_pending") for name, _ in scraped)
    assert value(scraped, "once_outbox_dead") == 1
    assert value(scraped, "once_inbox_dead_messages") == 2
    # The bound was the gauges' own: the connection's later queries wait as
    # long as they did.
    assert statement_timeout() == timeout_before


@pytest.mark.postgresql
@override_settings(IDEMPOTENCY=METRICS_ON)
def test_the_gauges_bound_stays_out_of_a_transaction_they_are_read_in():
    # A project's own view in ATOMIC_REQUESTS serving the registry: its later
    # queries must not inherit the gauges' timeout.
    registry = CollectorRegistry()
    register(registry)
    before = statement_timeout()

    with transaction.atomic():
        scraped = samples(generate_latest(registry).decode())
        during = statement_timeout()

    assert ("once_outbox_backlog", ()) in scraped
    assert during == before
