"""A database with Django's autocommit off commits none of the apps'
transactions: each entry point refuses it before any SQL, so nothing is
answered for and then rolled back when the connection closes."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from idempotency.checks import check_autocommit, check_engines
from idempotency.exceptions import IdempotencyConfigurationError
from idempotency.models import IdempotencyRecord
from inbox.api import receive
from inbox.models import InboxMessage
from outbox import relay
from outbox.api import record
from outbox.exceptions import OutboxConfigurationError
from outbox.models import OutboxMessage
from tests.testapp.models import Widget
from tests.webhooks import signing
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = r"\['AUTOCOMMIT'\] is False"


@pytest.fixture
def manual_commit(monkeypatch):
    # The setting as the project gives it; the open connection keeps its own
    # autocommit, as one made before the settings were read would.
    monkeypatch.setitem(connection.settings_dict, "AUTOCOMMIT", False)


def test_a_keyed_request_is_refused_before_its_claim(api, manual_commit):
    with pytest.raises(IdempotencyConfigurationError, match=REFUSED):
        api.post("/t/widgets/", {"name": "w"}, key="k")
    assert not IdempotencyRecord.objects.exists()
    assert not Widget.objects.exists()


def test_a_consumer_is_refused_before_its_inbox_row(manual_commit):
    with pytest.raises(ImproperlyConfigured, match=REFUSED), receive("stock", "m1"):
        Widget.objects.create(name="w")
    assert not InboxMessage.objects.exists()
    assert not Widget.objects.exists()


def test_a_webhook_is_refused_before_its_receipt(client, settings, manual_commit):
    github = {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]}
    settings.WEBHOOKS = {"SOURCES": {"github": github}}
    body = signing.event_body()
    headers = signing.github_headers(body)
    with pytest.raises(ImproperlyConfigured, match=REFUSED):
        client.post(
            "/webhooks/github/", body, content_type="application/json", headers=headers
        )
    assert not WebhookReceipt.objects.exists()


def test_an_event_and_the_relay_are_refused(manual_commit):
    with pytest.raises(OutboxConfigurationError, match=REFUSED), transaction.atomic():
        record("order", 1, "order.created", {"order": 1})
    with pytest.raises(OutboxConfigurationError, match=REFUSED):
        relay.claim(10)
    assert not OutboxMessage.objects.exists()


def test_the_check_reports_it(manual_commit):
    [error] = check_autocommit()
    assert error.id == "idempotency.E017"
    assert "DATABASES['default']['AUTOCOMMIT'] is False" in error.msg


def test_the_check_passes_with_autocommit_on():
    assert check_autocommit() == []


# A database engine the apps were never built for (MySQL, Oracle...): their
# statements assume PostgreSQL or SQLite (ON CONFLICT, SKIP LOCKED, a local
# lock_timeout), so each entry point refuses it before any SQL, as it does a
# database with autocommit off.
UNSUPPORTED = "uses the mysql engine"


@pytest.fixture
def mysql(monkeypatch):
    # The vendor Django's MySQL backend reports; nothing reaches a server.
    monkeypatch.setattr(connection, "vendor", "mysql")


def test_a_keyed_request_is_refused_on_an_unsupported_engine(api, mysql):
    with pytest.raises(IdempotencyConfigurationError, match=UNSUPPORTED):
        api.post("/t/widgets/", {"name": "w"}, key="k")
    assert not Widget.objects.exists()


def test_a_consumer_is_refused_on_an_unsupported_engine(mysql):
    with pytest.raises(ImproperlyConfigured, match=UNSUPPORTED), receive("s", "m1"):
        Widget.objects.create(name="w")
    assert not InboxMessage.objects.exists()


def test_a_webhook_is_refused_on_an_unsupported_engine(client, settings, mysql):
    github = {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]}
    settings.WEBHOOKS = {"SOURCES": {"github": github}}
    body = signing.event_body()
    headers = signing.github_headers(body)
    with pytest.raises(ImproperlyConfigured, match=UNSUPPORTED):
        client.post(
            "/webhooks/github/", body, content_type="application/json", headers=headers
        )
    assert not WebhookReceipt.objects.exists()


def test_an_event_and_the_relay_are_refused_on_an_unsupported_engine(mysql):
    refused = pytest.raises(OutboxConfigurationError, match=UNSUPPORTED)
    with refused, transaction.atomic():
        record("order", 1, "order.created", {"order": 1})
    with pytest.raises(OutboxConfigurationError, match=UNSUPPORTED):
        relay.claim(10)
    assert not OutboxMessage.objects.exists()


def test_the_check_reports_an_unsupported_engine(mysql):
    [error] = check_engines()
    assert error.id == "idempotency.E018"
    assert "DATABASES['default'] uses the mysql engine" in error.msg


def test_the_engine_check_passes_on_postgresql_and_sqlite():
    assert check_engines() == []
