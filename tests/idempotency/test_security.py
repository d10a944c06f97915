"""Scopes never leak; anonymous clients cannot grow the table without bound."""

import json
import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from idempotency.models import IdempotencyRecord
from tests.conftest import ApiClient
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db


def tenant_scope(request):
    user = request.user
    if not user.is_authenticated:
        return None
    return f"tenant:{user.last_name}"


def test_a_stored_answer_is_never_served_to_another_user(make_user):
    make_user("alice"), make_user("mallory")
    alice, mallory = ApiClient("alice"), ApiClient("mallory")
    mine = alice.post("/api/orders/", {"sku": "A", "quantity": 1}, key="k")
    theirs = mallory.post("/api/orders/", {"sku": "A", "quantity": 1}, key="k")

    assert "Idempotent-Replayed" not in theirs
    assert theirs.json()["id"] != mine.json()["id"]


def test_custom_scope_resolver_isolates_tenants_and_shares_within_one(
    make_user, settings
):
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": f"{__name__}.tenant_scope"}
    make_user("a1", last_name="acme"), make_user("a2", last_name="acme")
    make_user("g1", last_name="globex")
    body = {"name": "w"}

    first = ApiClient("a1").post("/t/widgets/", body, key="k")
    same_tenant = ApiClient("a2").post("/t/widgets/", body, key="k")
    other_tenant = ApiClient("g1").post("/t/widgets/", body, key="k")

    assert same_tenant["Idempotent-Replayed"] == "true"
    assert same_tenant.content == first.content
    assert "Idempotent-Replayed" not in other_tenant
    assert json.loads(other_tenant.content)["id"] != json.loads(first.content)["id"]
    assert set(IdempotencyRecord.objects.values_list("scope", flat=True)) == {
        "tenant:acme",
        "tenant:globex",
    }


def _browse(client, path="/t/widgets/"):
    """POST as the browsable API's form does: a session, HTML wanted."""
    return client.post(
        path,
        '{"name": "a"}',
        content_type="application/json",
        headers={"Idempotency-Key": "k", "Accept": "text/html"},
    )


def _session_of(user):
    client = Client()
    client.force_login(user)
    return client


def _assert_replayed_without_the_page_of(first, replay, first_client):
    assert first.status_code == 201
    assert first["Content-Type"].startswith("text/html")
    token = re.search(rb'"csrfToken": "([^"]+)"', first.content)[1]
    secret = first_client.cookies["csrftoken"].value.encode()

    assert replay.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    # The API's own rendering, whatever the retry accepts.
    assert replay["Content-Type"] == "application/json"
    assert json.loads(replay.content)["id"] == Widget.objects.get().pk
    assert token not in replay.content
    assert secret not in replay.content
    record = IdempotencyRecord.objects.get()
    assert bytes(record.response_body) == replay.content


@pytest.mark.parametrize("path", ["/t/widgets/", "/t/method/"])
def test_a_replay_never_carries_another_sessions_csrf_token(user, path):
    first_session, second_session = _session_of(user), _session_of(user)

    first = _browse(first_session, path)
    replay = _browse(second_session, path)

    _assert_replayed_without_the_page_of(first, replay, first_session)


def test_a_replay_in_a_tenant_scope_never_carries_a_colleagues_csrf_token(
    make_user, settings
):
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": f"{__name__}.tenant_scope"}
    alice = _session_of(make_user("alice", last_name="acme"))
    bob = _session_of(make_user("bob", last_name="acme"))

    first = _browse(alice)
    replay = _browse(bob)

    _assert_replayed_without_the_page_of(first, replay, alice)


def test_anonymous_keys_are_capped_per_operation(settings):
    settings.IDEMPOTENCY = {"ANONYMOUS_MAX_KEYS": 3}
    anonymous = ApiClient()
    statuses = [
        anonymous.post("/t/anonymous/", {"name": "w"}, key=f"k{i}").status_code
        for i in range(5)
    ]

    assert statuses == [201, 201, 201, 429, 429]
    refused = anonymous.post("/t/anonymous/", {"name": "w"}, key="k9")
    assert refused["Content-Type"] == "application/problem+json"
    assert refused["Retry-After"] == "60"
    assert IdempotencyRecord.objects.count() == 3
    assert Widget.objects.count() == 3
    # Replays of keys already held are still served.
    assert (
        anonymous.post("/t/anonymous/", {"name": "w"}, key="k0")["Idempotent-Replayed"]
        == "true"
    )


def test_a_cap_past_the_databases_integers_is_refused_before_any_count(settings):
    # The cap counts with LIMIT cap + 1: past a bigint every anonymous keyed
    # request failed in the database (DataError) instead of being refused
    # as a setting.
    settings.IDEMPOTENCY = {"ANONYMOUS_MAX_KEYS": 2**63 - 1}

    with pytest.raises(ImproperlyConfigured, match="ANONYMOUS_MAX_KEYS"):
        ApiClient().post("/t/anonymous/", {"name": "w"}, key="k")
    assert Widget.objects.count() == 0


def test_anonymous_keys_are_off_unless_the_view_opts_in():
    refused = ApiClient().post("/t/closed/", {"name": "w"}, key="k")

    assert refused.status_code == 403
    assert IdempotencyRecord.objects.count() == 0


# What fixed_scope returns; each test sets it.
returned_scope: dict = {"value": None}


def fixed_scope(request):
    return returned_scope["value"]


@pytest.mark.parametrize("scope", ["", "   ", "anonymous", 7, b"tenant:1", "t" * 256])
def test_a_scope_that_is_not_a_name_is_refused_before_anything_runs(
    make_user, settings, monkeypatch, scope
):
    # A resolver returning "" for every tenantless user put them in one scope:
    # bob reused alice's key and got her stored answer.
    monkeypatch.setitem(returned_scope, "value", scope)
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": f"{__name__}.fixed_scope"}
    make_user("alice"), make_user("bob")

    for name in ("alice", "bob"):
        client = ApiClient(name)
        client.client.raise_request_exception = False
        answer = client.post("/t/widgets/", {"name": name}, key="k")
        assert answer.status_code == 500

    assert not IdempotencyRecord.objects.exists()
    assert not Widget.objects.exists()


@pytest.mark.parametrize("operation", ["o" * 256, "", "widget\x00create", 7])
def test_an_operation_the_record_cannot_keep_is_refused_before_anything_runs(
    api, monkeypatch, operation
):
    # An overridden get_idempotency_operation() built from the URL went over
    # the column: the claim failed mid-request with a DataError.
    from idempotency.exceptions import IdempotencyConfigurationError
    from tests.testapp.views import WidgetViewSet

    monkeypatch.setattr(
        WidgetViewSet, "get_idempotency_operation", lambda view: operation
    )

    with pytest.raises(IdempotencyConfigurationError, match="cannot name keys"):
        api.post("/t/widgets/", {"name": "a"}, key="k")
    assert not IdempotencyRecord.objects.exists()
    assert not Widget.objects.exists()


def test_the_refusal_names_the_resolvers_value_and_the_operation(
    api, settings, monkeypatch
):
    from idempotency.exceptions import IdempotencyConfigurationError

    monkeypatch.setitem(returned_scope, "value", "")
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": f"{__name__}.fixed_scope"}

    refusal = r"returned '' for 'widget\.create'"
    with pytest.raises(IdempotencyConfigurationError, match=refusal):
        api.post("/t/widgets/", {"name": "a"}, key="k")


def test_a_resolver_returning_none_means_anonymous(api, settings, monkeypatch):
    monkeypatch.setitem(returned_scope, "value", None)
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": f"{__name__}.fixed_scope"}

    assert api.post("/t/widgets/", {"name": "a"}, key="k").status_code == 403
    assert api.post("/t/anonymous/", {"name": "a"}, key="k").status_code == 201
    assert IdempotencyRecord.objects.get().scope == "anonymous"


def test_a_principal_that_is_not_a_user_never_shares_a_users_scope(make_user):
    """An authentication of the project's own may make another model the
    request's principal (a merchant's API key). Its primary keys count
    apart from the users': with the same key and body, each gets its own
    answer, never the other's."""
    principal = Widget.objects.create(name="merchant")
    user = make_user("bob", pk=principal.pk)  # the same primary key
    body = {"name": "w"}

    theirs = ApiClient("bob").post("/t/principals/", body, key="order-42")
    mine = ApiClient().post(
        "/t/principals/", body, key="order-42", **{"X-Widget-Principal": str(user.pk)}
    )

    assert theirs.status_code == mine.status_code == 201
    assert "Idempotent-Replayed" not in mine
    assert json.loads(mine.content)["id"] != json.loads(theirs.content)["id"]
    scopes = set(IdempotencyRecord.objects.values_list("scope", flat=True))
    assert scopes == {f"user:{user.pk}", f"testapp.widget:{user.pk}"}


@pytest.mark.parametrize("debug", [False, True])
def test_a_refusals_instance_is_the_escaped_path_never_its_control_characters(
    api, settings, debug
):
    # The path is the client's: decoded, "%0D%0A" or "%1B" would reach a
    # problem's reader (a log line, a terminal) as a line break or an escape.
    settings.DEBUG = debug
    answer = api.client.put(
        "/t/raw/a%0D%0AX:%1B[31m%C3%A9/",
        data=b"x",
        content_type="application/octet-stream",
        headers={"Idempotency-Key": "k1,k2", "Authorization": api.auth},
    )

    assert answer.status_code == 400
    assert json.loads(answer.content)["instance"] == "/t/raw/a%0D%0AX:%1B%5B31m%C3%A9/"


def test_a_refusal_to_a_path_too_long_for_an_instance_has_none(api):
    answer = api.client.put(
        "/t/raw/" + "a" * 3000 + "/",
        data=b"x",
        content_type="application/octet-stream",
        headers={"Idempotency-Key": "k1,k2", "Authorization": api.auth},
    )

    assert answer.status_code == 400
    problem = json.loads(answer.content)
    assert problem["type"].endswith("key-malformed")
    assert "instance" not in problem
