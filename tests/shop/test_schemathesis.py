"""Generated requests against the demo, in process: no 5xx, answers as documented."""

import itertools

import pytest
import schemathesis
from django.test import override_settings
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_headers_conformance,
    response_schema_conformance,
)

from idempotency import keys
from idempotency.exceptions import KeyMalformed
from idempotency.responses import REPLAYED_HEADER
from project.wsgi import application
from tests.conftest import basic_auth

CHECKS = [not_a_server_error, response_schema_conformance, response_headers_conformance]


def _load_demo_schema():
    # The demo's own URLs, served by its WSGI application as in production.
    with override_settings(ROOT_URLCONF="project.urls"):
        return schemathesis.openapi.from_wsgi("/api/schema/", application)


# Loaded at collection: schemathesis' lazy fixture loader does not support
# pytest 9 yet. Serving the schema needs no database.
schema = _load_demo_schema()


@pytest.fixture
def new_client(transactional_db, django_user_model):
    """Return a fresh user's Basic credentials for each generated example.

    Generated keys repeat ("0" again and again); a fresh scope per example
    lets each one reach the view instead of answering 422 to the previous
    example's payload. Each WSGI request closes the database connection when
    it ends, so the data must be committed: a transactional test.
    """
    counter = itertools.count()

    def make():
        username = f"schemathesis-{next(counter)}"
        django_user_model.objects.create_user(username, password="pw")
        return basic_auth(username)

    return make


def _valid_key(case):
    try:
        return keys.parse((case.headers or {}).get("Idempotency-Key")) is not None
    except KeyMalformed:
        return False


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    # The same examples on every run: a CI failure is reproducible, never flaky.
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@pytest.mark.urls("project.urls")
def test_demo_api_answers_as_documented(case, new_client):
    auth = {"Authorization": new_client()}
    first = case.call_and_validate(headers=auth, checks=CHECKS)
    if case.method != "POST" or not _valid_key(case):
        return
    # The retry of a keyed request is the stored answer, also as documented.
    second = case.call_and_validate(headers=auth, checks=CHECKS)
    if first.status_code == 409:
        return  # not stored: a retry runs again
    if first.status_code in (400, 415):
        # A validation failure (or a body the view cannot parse) is not
        # saved: the retry runs and fails again.
        assert second.status_code == first.status_code
        assert REPLAYED_HEADER.lower() not in second.headers
        return
    assert second.status_code == first.status_code
    assert second.content == first.content
    # schemathesis' Response keeps headers as lower-cased lists.
    assert second.headers.get(REPLAYED_HEADER.lower()) == ["true"]
