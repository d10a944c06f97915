"""A keyed request is a unit of work: ``request.idempotency.unit``, its
``derive(step)``, and the intent its view's events carry."""

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from idempotency.claims import KEYLESS, Claim
from idempotency.exceptions import IdempotencyConfigurationError
from idempotency.shared import units

from . import unit_views

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.idempotency.unit_views")]


@pytest.fixture(autouse=True)
def _fresh_runs():
    unit_views.runs.clear()
    unit_views.failures["left"] = 0


def claim(key="k-1", scope="user:1", operation="op"):
    return Claim(
        key=key,
        scope=scope,
        operation=operation,
        request_hash="h",
        expires_at=None,
    )


def test_the_claims_derived_keys_are_the_ones_0_1_derived():
    # sha256("user:1\x1fop\x1fk-1\x1fcharge"): keys derived before units
    # existed, and handed to providers already, stay the same.
    assert claim().derive("charge") == (
        "8f6eb580706f01a193b032b52f7873f81e656e606feb10bfb691495f1c2e799a"
    )


def test_the_claim_delegates_to_its_unit():
    c = claim()
    assert c.unit == units.Unit(units.KEYS, ("user:1", "op", "k-1"))
    assert c.derive("charge") == c.unit.derive("charge")


def test_derived_keys_differ_across_scopes_operations_keys_and_steps():
    derived = {
        claim().derive("charge"),
        claim(scope="user:2").derive("charge"),
        claim(operation="other").derive("charge"),
        claim(key="k-2").derive("charge"),
        claim().derive("ship"),
    }
    assert len(derived) == 5


@pytest.mark.parametrize("path", ["/lease/", "/atomic/"])
def test_a_retried_request_derives_the_same_keys_and_serves_the_same_intent(
    api, user, path
):
    unit_views.failures["left"] = 1
    with pytest.raises(RuntimeError):
        api.post(path, {}, key="retry-me")
    assert api.post(path, {}, key="retry-me").status_code == 201

    first, retry = unit_views.runs
    assert first["derived"] == retry["derived"]
    assert first["event_intent"] == retry["event_intent"]
    # The view ran with the request's unit current, and record() tagged its
    # event with that unit's intent.
    operation = "unit.lease" if path == "/lease/" else "unit.atomic"
    expected = units.Unit(units.KEYS, (f"user:{user.pk}", operation, "retry-me"))
    assert first["current"] == first["unit"] == expected
    assert first["event_intent"] == expected.intent
    # A third attempt replays the stored answer: the same derived key.
    assert api.post(path, {}, key="retry-me").json() == {"derived": first["derived"]}


def test_another_key_or_client_serves_another_intent(api, make_user):
    from tests.conftest import ApiClient

    api.post("/atomic/", {}, key="a")
    api.post("/atomic/", {}, key="b")
    make_user("bob")
    ApiClient("bob").post("/atomic/", {}, key="a")

    alice_a, _, bob_a = unit_views.runs
    assert len({r["derived"] for r in unit_views.runs}) == 3
    assert len({r["event_intent"] for r in unit_views.runs}) == 3
    assert alice_a["unit"] != bob_a["unit"]


def test_neither_the_derived_key_nor_the_intent_holds_the_raw_key(api):
    raw = "a-client-key-that-must-stay-with-us"
    api.post("/atomic/", {}, key=raw)

    (run,) = unit_views.runs
    for value in (run["derived"], run["event_intent"], run["unit"].identity):
        assert raw not in value
        assert len(value) == 64


def test_no_unit_is_current_outside_the_view(api):
    api.post("/atomic/", {}, key="k")
    assert unit_views.runs[0]["current"] is not None
    assert units.current() is None


@pytest.mark.django_db(transaction=True)
def test_an_async_view_runs_as_its_request_and_its_events_carry_the_intent(user):
    client = AsyncClient()
    client.force_login(user)
    response = async_to_sync(client.post)(
        "/async/", {}, content_type="application/json", headers={"Idempotency-Key": "k"}
    )
    assert response.status_code == 201

    (run,) = unit_views.runs
    assert run["current"] == run["unit"]
    assert run["event_intent"] == run["unit"].intent


@pytest.mark.parametrize("kind", [units.INBOX, units.WEBHOOKS])
def test_a_keyed_request_scoped_by_another_kinds_name_is_never_its_unit(kind):
    # A SCOPE_RESOLVER returning a tenant's slug, "inbox" or "webhooks".
    keyed = claim(scope=kind, operation="stock", key="m1").unit
    other = units.Unit(kind, ("stock", "m1"))

    assert keyed.identity != other.identity
    assert keyed.derive("charge") != other.derive("charge")
    assert keyed.intent != other.intent


def test_a_request_without_an_optional_key_serves_no_unit_and_no_intent():
    """A key-optional view reading the handle's unit or intent (to log it, to
    pass it on) must not fail with AttributeError, a 500 whose retry runs the
    view again, when a request comes without a key: it has neither."""
    assert (KEYLESS.unit, KEYLESS.intent, KEYLESS.steps) == (None, None, None)


def test_a_request_without_an_optional_key_derives_nothing():
    """Without a key there is no unit: a derived key would differ on every
    retry, so derive() and step() refuse, naming why; the handle is False."""
    assert not KEYLESS
    assert KEYLESS.set_resource(object()) is None
    with pytest.raises(IdempotencyConfigurationError, match="needs a key"):
        KEYLESS.derive("charge")
    with pytest.raises(IdempotencyConfigurationError, match="needs a key"):
        KEYLESS.step("charge", lambda key: key)


def test_a_resource_the_record_cannot_point_at_is_refused_where_it_is_set():
    # Rule 11: an unsaved object was stored as the pointer "None", and a
    # primary key over the column's 255 characters failed only when the answer
    # was stored (PostgreSQL's DataError), after the view's work: in steps mode
    # every retry redid the steps' replay and failed there again.
    from tests.testapp.models import Widget

    with pytest.raises(ValueError, match=r"set_resource\(\).*saved"):
        claim().set_resource(Widget(name="unsaved"))
    overlong = Widget(name="w")
    overlong.pk = "9" * 256
    with pytest.raises(ValueError, match=r"set_resource\(\).*255"):
        claim().set_resource(overlong)
    fits = Widget(name="w")
    fits.pk = "9" * 255
    pointing = claim()
    pointing.set_resource(fits)
    assert pointing.resource == ("testapp.widget", "9" * 255)
