"""What a completed record keeps of an answer, and what a retry of it gets.

No success reaches a client while its work is undone (DESIGN rule 12): an
answer that is not stored keeps its work, the key completes without it, and
a retry is told so instead of running the work again.
"""

import gzip
import json
import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.middleware.csrf import get_token
from django.middleware.locale import LocaleMiddleware
from django.test import Client

from idempotency.checks import check_settings
from idempotency.models import IdempotencyRecord
from outbox.models import OutboxMessage
from tests.testapp.models import Order, Widget

pytestmark = pytest.mark.django_db(transaction=True)


def problem_type(response):
    assert response["Content-Type"] == "application/problem+json"
    return json.loads(response.content)["type"].rsplit("/", 1)[1]


def post(client, path, key="k", name="a"):
    return client.post(
        path,
        json.dumps({"name": name}),
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )


def session_of(user):
    client = Client()
    client.force_login(user)
    return client


def assert_kept_without_answer(first_status):
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.status_code) == ("completed", first_status)
    assert record.response_body is None


# Item 2: a status STORE_STATUS declines never undoes a success.


def test_a_store_status_declining_a_2xx_is_refused_before_any_order(api, settings):
    settings.IDEMPOTENCY = {"STORE_STATUS": "tests.testapp.policies.only_200"}

    with pytest.raises(ImproperlyConfigured, match="declines success statuses: 201"):
        api.post("/api/orders/", {"sku": "A", "quantity": 1}, key="k")

    assert Order.objects.count() == OutboxMessage.objects.count() == 0
    assert IdempotencyRecord.objects.count() == 0
    [error] = check_settings()
    assert error.id == "idempotency.E007"
    assert len(error.msg) < 80


@pytest.mark.parametrize("path", ["/t/redirect/", "/t/redirect-lease/"])
def test_a_declined_success_keeps_its_work_and_a_retry_is_told(user, settings, path):
    settings.IDEMPOTENCY = {"STORE_STATUS": "tests.testapp.policies.only_2xx"}
    client = session_of(user)

    first = post(client, path)
    assert first.status_code == 302
    assert first["Location"] == f"/widgets/{Widget.objects.get().pk}/"
    assert_kept_without_answer(302)

    retry = post(client, path)
    assert retry.status_code == 409
    assert problem_type(retry) == "answer-not-kept"
    assert "status 302" in json.loads(retry.content)["detail"]
    assert "Retry-After" not in retry
    assert Widget.objects.count() == 1


def test_a_declined_error_still_rolls_back_and_runs_again(api, settings):
    settings.IDEMPOTENCY = {"STORE_STATUS": "tests.testapp.policies.only_2xx"}
    from tests.testapp import views

    views.faults["402"] = 1  # the widget is created, then a 402 is answered
    assert api.post("/t/widgets/", {"name": "a"}, key="k").status_code == 402
    assert Widget.objects.count() == 0

    assert api.post("/t/widgets/", {"name": "a"}, key="k").status_code == 201


# Item 7: no session secret in any replay.


def test_a_page_with_a_csrf_token_is_never_stored_nor_replayed_to_another_session(
    user,
):
    first_session, second_session = session_of(user), session_of(user)

    first = post(first_session, "/t/page/")
    assert first.status_code == 201
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', first.content)[1]
    assert_kept_without_answer(201)

    other = post(second_session, "/t/page/")
    same = post(first_session, "/t/page/")

    for retry in (other, same):
        assert retry.status_code == 409
        assert problem_type(retry) == "answer-not-kept"
        assert token not in retry.content
    assert Widget.objects.count() == 1


def test_a_drf_page_with_no_api_rendering_is_stored_as_the_page(user):
    """A view whose only renderer is HTML (TemplateHTMLRenderer) has no API
    rendering to store instead, and its data may hold model instances: its
    page is kept, as a plain Django page is."""
    client = session_of(user)

    first = post(client, "/t/html/")
    retry = post(client, "/t/html/")

    assert first.status_code == retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry["Content-Type"] == first["Content-Type"]
    assert retry.content == first.content == b"<p>Widget a</p>\n"
    assert Widget.objects.count() == 1


def test_a_drf_page_whose_data_only_the_page_renders_is_stored_as_the_page(user):
    """The view hands the page model instances, which its JSON renderer
    cannot render: the page is its only rendering of that answer."""
    client = session_of(user)

    def send():
        return client.post(
            "/t/html-or-json/",
            json.dumps({"name": "a"}),
            content_type="application/json",
            headers={"Idempotency-Key": "k", "Accept": "text/html"},
        )

    first, retry = send(), send()

    assert first.status_code == retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content == b"<p>Widget a</p>\n"
    assert Widget.objects.count() == 1


def test_a_drf_page_with_a_csrf_token_and_no_api_rendering_is_not_kept(user):
    first_session, second_session = session_of(user), session_of(user)

    def send(client):
        return client.post(
            "/t/html/",
            json.dumps({"name": "a", "template": "widget_form"}),
            content_type="application/json",
            headers={"Idempotency-Key": "k"},
        )

    first = send(first_session)
    assert first.status_code == 201
    assert b"csrfmiddlewaretoken" in first.content
    assert_kept_without_answer(201)
    for retry in (send(second_session), send(first_session)):
        assert retry.status_code == 409
        assert problem_type(retry) == "answer-not-kept"
    assert Widget.objects.count() == 1


def test_a_page_with_a_csrf_token_in_a_tenant_scope_never_reaches_a_colleague(
    make_user, settings
):
    settings.IDEMPOTENCY = {
        "SCOPE_RESOLVER": "tests.idempotency.test_security.tenant_scope"
    }
    alice = session_of(make_user("alice", last_name="acme"))
    bob = session_of(make_user("bob", last_name="acme"))

    first = post(alice, "/t/page/")
    colleague = post(bob, "/t/page/")

    assert b"csrfmiddlewaretoken" in first.content
    assert colleague.status_code == 409
    assert b"csrfmiddlewaretoken" not in colleague.content
    assert Widget.objects.count() == 1


def token_reading_middleware(get_response):
    def middleware(request):
        get_token(request)  # a middleware handing the token to a page's script
        return get_response(request)

    return middleware


@pytest.mark.parametrize(
    "flagged_by", ["ensure_csrf_cookie", "a middleware", "a malformed cookie"]
)
def test_a_page_with_a_csrf_token_flagged_before_the_view_is_never_replayed(
    user, settings, flagged_by
):
    path = "/t/page-ensured/" if flagged_by == "ensure_csrf_cookie" else "/t/page/"
    if flagged_by == "a middleware":
        middleware = f"{__name__}.token_reading_middleware"
        settings.MIDDLEWARE = [*settings.MIDDLEWARE, middleware]
    first_session, second_session = session_of(user), session_of(user)
    if flagged_by == "a malformed cookie":
        for client in (first_session, second_session):
            client.cookies["csrftoken"] = "malformed"

    first = post(first_session, path)
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', first.content)[1]
    assert_kept_without_answer(201)
    other = post(second_session, path)

    assert other.status_code == 409
    assert problem_type(other) == "answer-not-kept"
    assert token not in other.content
    # The cookie the flag asked for is still sent, refusals included.
    assert "csrftoken" in first.cookies
    assert "csrftoken" in other.cookies
    assert Widget.objects.count() == 1


@pytest.mark.parametrize("path", ["/t/plain/", "/t/vary-cookie/", "/t/cookie/"])
def test_a_cookie_bound_answer_replays_only_to_its_own_session(user, path):
    first_session, second_session = session_of(user), session_of(user)

    first = post(first_session, path)
    other = post(second_session, path)
    same = post(first_session, path)

    assert first.status_code == 201
    assert other.status_code == 409
    assert problem_type(other) == "answer-not-shared"
    assert first.content not in other.content
    assert same["Idempotent-Replayed"] == "true"
    assert same.content == first.content
    record = IdempotencyRecord.objects.get()
    assert len(record.session_digest) == 64
    # Only a digest of the session cookie is stored, never the cookie.
    assert first_session.session.session_key not in record.session_digest
    assert Widget.objects.count() == 1


def test_a_compressed_answer_replays_with_its_content_encoding(user, client):
    """The stored bytes are the view's gzip (a gzip_page below @idempotent):
    replayed without Content-Encoding, the client would read them as JSON."""
    client.force_login(user)
    kwargs = {
        "content_type": "application/json",
        "headers": {"Idempotency-Key": "k", "Accept-Encoding": "gzip"},
    }
    first = client.post("/t/gzip/", '{"name": "a"}', **kwargs)
    retry = client.post("/t/gzip/", '{"name": "a"}', **kwargs)

    assert first["Content-Encoding"] == "gzip"
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert retry.get("Content-Encoding") == "gzip"
    assert json.loads(gzip.decompress(retry.content))["id"] == Widget.objects.get().pk


def gzip_then_without_gzip(user, client):
    """A first request accepting gzip, then its retry not accepting it."""
    client.force_login(user)
    kwargs = {"content_type": "application/json"}
    first = client.post(
        "/t/gzip/",
        '{"name": "a"}',
        headers={"Idempotency-Key": "k", "Accept-Encoding": "gzip"},
        **kwargs,
    )
    retry = client.post(
        "/t/gzip/", '{"name": "a"}', headers={"Idempotency-Key": "k"}, **kwargs
    )
    return first, retry


def test_a_compressed_answer_replays_uncompressed_to_a_client_without_gzip(
    user, client
):
    """The first client accepted gzip, its retry does not: gzip bytes would be
    unreadable to it, as gzip_page would never have sent them."""
    first, retry = gzip_then_without_gzip(user, client)

    assert first["Content-Encoding"] == "gzip"
    assert retry["Idempotent-Replayed"] == "true"
    assert "Content-Encoding" not in retry
    assert retry.content == gzip.decompress(first.content)
    assert json.loads(retry.content)["id"] == Widget.objects.get().pk
    assert "Accept-Encoding" in retry["Vary"]
    assert Widget.objects.count() == 1


def test_a_decompressed_replay_does_not_keep_the_compressed_length(
    user, client, settings
):
    """Content-Length in REPLAY_HEADERS stores gzip_page's length of the gzip
    bytes: sent with the decompressed ones, it cuts the answer short."""
    settings.IDEMPOTENCY = {"REPLAY_HEADERS": ["Content-Length"]}
    first, retry = gzip_then_without_gzip(user, client)

    assert first["Content-Length"] == str(len(first.content))
    assert retry["Idempotent-Replayed"] == "true"
    assert retry["Content-Length"] == str(len(retry.content))
    assert json.loads(retry.content)["id"] == Widget.objects.get().pk


def test_a_replay_keeps_the_language_of_its_answer(api, settings):
    """LocaleMiddleware labels each answer with the request's language after
    the view: a retry asking in English got the French answer labelled "en"."""
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.middleware.locale.LocaleMiddleware",
    ]
    first = api.post("/t/widgets/", {"name": "a"}, key="k", **{"Accept-Language": "fr"})
    retry = api.post("/t/widgets/", {"name": "a"}, key="k", **{"Accept-Language": "en"})

    assert first["Content-Language"] == "fr"
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert retry["Content-Language"] == "fr"
    assert Widget.objects.count() == 1


class ProjectLocaleMiddleware(LocaleMiddleware):
    """A project's own LocaleMiddleware: it labels answers all the same."""


def test_a_replay_keeps_the_language_a_locale_middleware_subclass_gave(api, settings):
    # Only Django's own dotted path was looked for: the replay was labelled
    # with the retry's language.
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        f"{__name__}.ProjectLocaleMiddleware",
    ]
    first = api.post("/t/widgets/", {"name": "a"}, key="k", **{"Accept-Language": "fr"})
    retry = api.post("/t/widgets/", {"name": "a"}, key="k", **{"Accept-Language": "en"})

    assert first["Content-Language"] == "fr"
    assert retry["Idempotent-Replayed"] == "true"
    assert retry["Content-Language"] == "fr"
    assert Widget.objects.count() == 1


def test_a_replay_keeps_the_language_the_view_gave_its_answer(user):
    client = session_of(user)

    first = post(client, "/t/german/")
    retry = post(client, "/t/german/")

    assert first["Content-Language"] == "de"
    assert retry["Idempotent-Replayed"] == "true"
    assert retry["Content-Language"] == "de"
    assert Widget.objects.count() == 1


def test_a_cookie_bound_answer_without_a_session_is_not_kept(api):
    # HTTP Basic: no session cookie to bind the answer to.
    first = api.post("/t/cookie/", {"name": "a"}, key="k")
    retry = api.post("/t/cookie/", {"name": "a"}, key="k")

    assert first.status_code == 201
    assert "last_widget" in first.cookies
    assert_kept_without_answer(201)
    assert problem_type(retry) == "answer-not-kept"
    assert Widget.objects.count() == 1


# A streamed answer is sent after the claim has ended: it is never kept.


@pytest.mark.parametrize(
    ("path", "status"), [("/t/stream/", 201), ("/t/file/", 200)], ids=["stream", "file"]
)
def test_a_streamed_answer_reaches_the_client_and_keeps_its_work(user, path, status):
    client = session_of(user)

    first = post(client, path)
    assert first.status_code == status
    assert b"%d" % Widget.objects.get().pk in first.getvalue()
    assert_kept_without_answer(status)

    retry = post(client, path)
    assert retry.status_code == 409
    assert problem_type(retry) == "answer-not-kept"
    assert Widget.objects.count() == 1


def test_a_streamed_error_the_policy_declines_still_rolls_back(user):
    first = post(session_of(user), "/t/stream/", name="unavailable")

    assert first.status_code == 503
    assert Widget.objects.count() == 0
    assert IdempotencyRecord.objects.get().state == "failed"


# Item 12d: MAX_STORED_BODY bounds what is stored, and loses nothing.


@pytest.mark.parametrize(
    ("path", "body"),
    [("/t/widgets/", {"name": "a"}), ("/t/charge/", {})],
    ids=["atomic", "lease"],
)
def test_an_answer_over_max_stored_body_reaches_the_client_and_keeps_its_work(
    api, settings, path, body
):
    settings.IDEMPOTENCY = {"MAX_STORED_BODY": 8}

    first = api.post(path, body, key="k")
    assert first.status_code == 201
    assert len(first.content) > 8
    assert Widget.objects.count() == 1
    assert_kept_without_answer(201)

    retry = api.post(path, body, key="k")
    assert retry.status_code == 409
    assert problem_type(retry) == "answer-not-kept"
    assert Widget.objects.count() == 1


def test_an_answer_at_max_stored_body_is_stored(api, settings):
    first = api.post("/t/widgets/", {"name": "a"}, key="k")
    IdempotencyRecord.objects.all().delete()
    Widget.objects.all().delete()
    settings.IDEMPOTENCY = {"MAX_STORED_BODY": len(first.content)}

    api.post("/t/widgets/", {"name": "a"}, key="k")
    replay = api.post("/t/widgets/", {"name": "a"}, key="k")

    assert replay["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize("value", [0, -1, "1MB", True, 1.5])
def test_a_bad_max_stored_body_is_refused(api, settings, value):
    settings.IDEMPOTENCY = {"MAX_STORED_BODY": value}

    assert [error.id for error in check_settings()] == ["idempotency.E012"]
    with pytest.raises(ImproperlyConfigured, match="MAX_STORED_BODY"):
        api.post("/t/widgets/", {"name": "a"}, key="k")
    assert Widget.objects.count() == 0
