"""The intake's HTTP contract: 411, 413, 415, 401/400, 202, 200, 404, 405."""

import base64
import gzip
import hashlib
import hmac
import json
import time
from dataclasses import replace
from datetime import timedelta
from urllib.parse import quote_plus

import pytest
from django.test import Client
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.webhooks import signing
from webhooks import handlers, processing
from webhooks.bodies import FORM
from webhooks.models import WebhookReceipt, WebhookRejection
from webhooks.verifiers.hmac import HmacVerifier

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def post(path, body, headers, client=None):
    return (client or Client()).post(
        path, data=body, content_type="application/json", headers=headers
    )


def deliver(delivery_id="evt_1", **extra):
    body = signing.event_body(delivery_id)
    headers = signing.github_headers(body, delivery_id=delivery_id)
    return post("/webhooks/github/", body, {**headers, **extra})


def problem(response):
    assert response["Content-Type"] == PROBLEM
    return json.loads(response.content)


def test_a_verified_delivery_is_stored_enqueued_and_answered_202(
    django_capture_on_commit_callbacks,
):
    body = signing.event_body()
    headers = {
        **signing.github_headers(body),
        "Cookie": "session=1",
        "Authorization": "Bearer x",
    }
    with django_capture_on_commit_callbacks() as callbacks:
        response = post("/webhooks/github/", body, headers)

    assert response.status_code == 202
    assert len(callbacks) == 1
    receipt = WebhookReceipt.objects.get()
    assert (receipt.source, receipt.delivery_id) == ("github", "evt_1")
    assert receipt.event_type == "push"
    assert receipt.state == "received"
    assert bytes(receipt.body) == body
    assert set(receipt.headers) == {
        "Content-Type",
        "X-GitHub-Delivery",
        "X-GitHub-Event",
    }


def test_the_raw_body_is_stored_byte_for_byte():
    body = b'{"b": 1,   "a": [2]}\n'
    post("/webhooks/github/", body, signing.github_headers(body))
    assert bytes(WebhookReceipt.objects.get().body) == body


def test_csrf_does_not_apply():
    body = signing.event_body()
    response = post(
        "/webhooks/github/",
        body,
        signing.github_headers(body),
        client=Client(enforce_csrf_checks=True),
    )
    assert response.status_code == 202


def test_a_duplicate_answers_200_and_enqueues_nothing(
    django_capture_on_commit_callbacks,
):
    deliver()
    with django_capture_on_commit_callbacks() as callbacks:
        response = deliver()

    assert response.status_code == 200
    assert json.loads(response.content)["duplicate"] is True
    assert callbacks == []
    assert WebhookReceipt.objects.count() == 1


@pytest.mark.parametrize("state", ["received", "processed", "skipped"])
def test_a_duplicate_of_a_live_or_finished_receipt_is_not_reprocessed(
    state, django_capture_on_commit_callbacks
):
    deliver()
    WebhookReceipt.objects.update(state=state)
    with django_capture_on_commit_callbacks() as callbacks:
        assert deliver().status_code == 200
    assert callbacks == []
    assert WebhookReceipt.objects.get().state == state


def test_a_redelivery_of_a_failed_receipt_is_enqueued_again(
    django_capture_on_commit_callbacks,
):
    deliver()
    WebhookReceipt.objects.update(state="failed", attempts=1)
    with django_capture_on_commit_callbacks() as callbacks:
        response = deliver()

    assert response.status_code == 202
    assert len(callbacks) == 1
    assert WebhookReceipt.objects.get().state == "received"


def _resign(source):
    """Sign a body for ``source`` under any delivery id and event header."""
    if source == "github":
        return signing.github_headers
    if source == "hmac":
        return signing.hmac_headers
    return lambda body, **ids: signing.hmac_headers(
        body, timestamp=int(time.time()), **ids
    )


@pytest.fixture(params=["github", "hmac", "hmac-timestamped"])
def unsigned_id_source(request, webhook_sources):
    """A source whose signature leaves the delivery id and event open."""
    if request.param == "hmac-timestamped":
        # The timestamp is signed; the delivery id still is not.
        hmac_source = webhook_sources.WEBHOOKS["SOURCES"]["hmac"]
        hmac_source["OPTIONS"] = {"TIMESTAMP_HEADER": "X-Webhook-Timestamp"}
    return request.param.removesuffix("-timestamped"), _resign(request.param)


def test_a_body_resent_under_a_new_delivery_id_is_a_duplicate_counted_as_a_replay(
    unsigned_id_source, django_capture_on_commit_callbacks, clock
):
    source, sign = unsigned_id_source
    body = signing.event_body("evt_1")
    first = post(f"/webhooks/{source}/", body, sign(body, delivery_id="evt_1"))
    with django_capture_on_commit_callbacks() as callbacks:
        # Captured and sent again under fresh, unsigned id and event headers.
        replayed = post(
            f"/webhooks/{source}/",
            body,
            sign(body, delivery_id="evt_forged", event="release"),
        )

    assert first.status_code == 202
    assert replayed.status_code == 200
    assert json.loads(replayed.content) == {
        "delivery_id": "evt_forged",
        "state": "received",
        "duplicate": True,
    }
    assert callbacks == []
    receipt = WebhookReceipt.objects.get()
    assert receipt.delivery_id == "evt_1"
    assert receipt.body_sha256 == hashlib.sha256(body).hexdigest()
    rejection = WebhookRejection.objects.get()
    assert (rejection.source, rejection.reason, rejection.count) == (
        source,
        "replayed-body",
        1,
    )
    assert rejection.day == clock.now().date()


def test_a_replayed_body_does_not_reopen_its_failed_receipt(
    django_capture_on_commit_callbacks,
):
    body = signing.event_body("evt_1")
    post("/webhooks/github/", body, signing.github_headers(body, delivery_id="evt_1"))
    WebhookReceipt.objects.update(state="failed", attempts=1)
    with django_capture_on_commit_callbacks() as callbacks:
        response = post(
            "/webhooks/github/", body, signing.github_headers(body, delivery_id="x")
        )

    assert response.status_code == 200
    assert callbacks == []
    assert WebhookReceipt.objects.get().state == "failed"


def test_the_delivery_id_decides_which_receipt_a_resend_duplicates(
    django_capture_on_commit_callbacks,
):
    first, second = signing.event_body("evt_1"), signing.event_body("evt_2")
    post("/webhooks/github/", first, signing.github_headers(first, delivery_id="a"))
    post("/webhooks/github/", second, signing.github_headers(second, delivery_id="b"))
    WebhookReceipt.objects.filter(delivery_id="a").update(state="failed")
    # Delivery id "a" with the body of "b": both unique indexes conflict.
    with django_capture_on_commit_callbacks() as callbacks:
        response = post(
            "/webhooks/github/", second, signing.github_headers(second, delivery_id="a")
        )

    assert response.status_code == 202
    assert len(callbacks) == 1
    assert WebhookReceipt.objects.get(delivery_id="a").state == "received"
    assert not WebhookRejection.objects.exists()


@pytest.mark.parametrize("source", ["stripe", "standard"])
def test_a_source_that_signs_its_delivery_ids_keeps_no_body_hash(source):
    body = signing.event_body("evt_1")
    sign = {"stripe": signing.stripe_headers, "standard": signing.standard_headers}
    assert post(f"/webhooks/{source}/", body, sign[source](body)).status_code == 202
    assert WebhookReceipt.objects.get().body_sha256 == ""


def test_the_same_body_under_a_newly_signed_id_is_a_new_delivery():
    """Standard Webhooks signs the id: a new id needs the secret, so it is a
    new delivery even when the body repeats."""
    body = signing.event_body("evt_1")
    for msg_id in ("msg_1", "msg_2"):
        headers = signing.standard_headers(body, msg_id=msg_id)
        assert post("/webhooks/standard/", body, headers).status_code == 202
    assert WebhookReceipt.objects.count() == 2


def test_a_signed_delivery_id_reused_with_another_body_is_not_run_and_is_counted():
    # A sender that reuses an id for another event loses that event: it is
    # answered as a duplicate (never run twice), and the console shows it.
    first = signing.event_body("evt_1", amount=1)
    second = signing.event_body("evt_1", amount=2)
    for body, status in ((first, 202), (second, 200)):
        headers = signing.standard_headers(body, msg_id="msg_1")
        assert post("/webhooks/standard/", body, headers).status_code == status

    assert bytes(WebhookReceipt.objects.get().body) == first
    counts = WebhookRejection.objects.values_list("source", "reason", "count")
    assert list(counts) == [("standard", "changed-body", 1)]


def test_a_stripe_retry_whose_event_changed_since_is_a_plain_duplicate():
    # Stripe renders an event again for each attempt: pending_webhooks falls
    # as other endpoints take it. That is the same event, not a lost one.
    for pending, status in ((2, 202), (1, 200)):
        body = signing.event_body("evt_1", pending_webhooks=pending)
        response = post("/webhooks/stripe/", body, signing.stripe_headers(body))
        assert response.status_code == status

    assert not WebhookRejection.objects.exists()


def svix_named(headers):
    """The same delivery under Svix's header names (svix-id, ...)."""
    return {name.replace("webhook-", "svix-"): value for name, value in headers.items()}


def test_a_delivery_under_svix_header_names_is_accepted():
    body = signing.event_body("evt_1")
    headers = svix_named(signing.standard_headers(body, msg_id="msg_svix"))
    response = post("/webhooks/standard/", body, headers)

    assert response.status_code == 202
    receipt = WebhookReceipt.objects.get()
    assert receipt.delivery_id == "msg_svix"
    assert "svix-signature" not in receipt.headers


def test_svix_header_names_are_read_before_the_standard_ones():
    # Svix's library reads svix-* first: a valid webhook-* set does not make
    # a forged svix-* one pass.
    body = signing.event_body("evt_1")
    wrong = "whsec_" + base64.b64encode(b"not the source's key!!").decode()
    forged = svix_named(signing.standard_headers(body, secret=wrong))
    headers = {**signing.standard_headers(body), **forged}
    response = post("/webhooks/standard/", body, headers)
    assert response.status_code == 401
    assert not WebhookReceipt.objects.exists()


def test_a_bad_signature_is_401_stores_nothing_and_is_counted(clock):
    body = signing.event_body()
    headers = signing.github_headers(body, secret="wrong")
    first = post("/webhooks/github/", body, headers)
    post("/webhooks/github/", body, headers)

    assert first.status_code == 401
    assert problem(first)["type"].endswith("/webhook-bad-signature")
    assert not WebhookReceipt.objects.exists()
    rejection = WebhookRejection.objects.get()
    assert (rejection.source, rejection.reason, rejection.count) == (
        "github",
        "bad-signature",
        2,
    )
    assert rejection.day == clock.now().date()


class ReadReplicaRouter:
    """Reads from a replica (not configured here: a read that reaches it
    fails), writes to the primary."""

    def db_for_read(self, model, **hints):
        return "replica"

    def db_for_write(self, model, **hints):
        return "default"


def test_rejections_are_counted_on_the_database_for_writes(settings):
    settings.DATABASE_ROUTERS = [f"{__name__}.ReadReplicaRouter"]
    body = signing.event_body()
    forged = post("/webhooks/github/", body, signing.github_headers(body, "wrong"))
    post("/webhooks/github/", body, signing.github_headers(body, delivery_id="a"))
    replayed = post(
        "/webhooks/github/", body, signing.github_headers(body, delivery_id="b")
    )

    # Not a 500: the count is an INSERT, never sent where reads go.
    assert (forged.status_code, replayed.status_code) == (401, 200)
    counts = WebhookRejection.objects.using("default").values_list("reason", "count")
    assert sorted(counts) == [("bad-signature", 1), ("replayed-body", 1)]


def test_rejections_are_counted_per_source_reason_and_day(clock):
    post("/webhooks/github/", b"{}", {})
    clock.advance(days=1)
    post("/webhooks/github/", b"{}", {})
    post("/webhooks/stripe/", b"{}", {})

    counts = WebhookRejection.objects.values_list("source", "reason", "count")
    assert sorted(counts) == [
        ("github", "missing-header", 1),
        ("github", "missing-header", 1),
        ("stripe", "missing-header", 1),
    ]


def test_missing_headers_are_401():
    response = post("/webhooks/stripe/", signing.event_body(), {})
    assert response.status_code == 401
    assert problem(response)["type"].endswith("/webhook-missing-header")


def test_an_expired_delivery_is_401(clock):
    body = signing.event_body()
    headers = signing.stripe_headers(body)
    clock.advance(seconds=301)
    assert post("/webhooks/stripe/", body, headers).status_code == 401


SIGN = {
    "github": signing.github_headers,
    "stripe": signing.stripe_headers,
    "standard": signing.standard_headers,
    "hmac": signing.hmac_headers,
}


@pytest.mark.parametrize("body", [b"Hello, World!", b"\xff\xfe\xfd", b"[1, 2]"])
@pytest.mark.parametrize("source", sorted(SIGN))
def test_a_signed_body_that_is_not_a_json_event_is_400(source, body):
    response = post(f"/webhooks/{source}/", body, SIGN[source](body))
    assert response.status_code == 400
    assert problem(response)["type"].endswith("/webhook-malformed-body")
    assert not WebhookReceipt.objects.exists()
    assert WebhookRejection.objects.get().reason == "malformed-body"


@pytest.mark.parametrize("source", sorted(SIGN))
def test_a_signed_empty_body_is_400_and_stores_nothing(source):
    response = post(f"/webhooks/{source}/", b"", SIGN[source](b""))
    assert response.status_code == 400
    assert problem(response)["type"].endswith("/webhook-malformed-body")
    assert not WebhookReceipt.objects.exists()


def test_a_raw_hmac_source_takes_a_signed_empty_body(webhook_sources):
    webhook_sources.WEBHOOKS["SOURCES"]["hmac"]["OPTIONS"] = {"BODY": "raw"}
    response = post("/webhooks/hmac/", b"", SIGN["hmac"](b""))
    assert response.status_code == 202
    assert bytes(WebhookReceipt.objects.get().body) == b""


@pytest.mark.parametrize("source", sorted(SIGN))
def test_a_signed_form_whose_payload_is_not_a_json_object_is_400(source):
    body = b"payload=" + quote_plus("[1, 2]").encode()
    response = Client().post(
        f"/webhooks/{source}/", body, content_type=FORM, headers=SIGN[source](body)
    )
    assert response.status_code == 400
    assert problem(response)["type"].endswith("/webhook-malformed-body")
    assert not WebhookReceipt.objects.exists()


def test_a_raw_hmac_source_takes_a_body_that_is_not_json(webhook_sources):
    webhook_sources.WEBHOOKS["SOURCES"]["hmac"]["OPTIONS"] = {"BODY": "raw"}
    body = b"<event>not json</event>"
    response = Client().post(
        "/webhooks/hmac/", body, content_type="text/xml", headers=SIGN["hmac"](body)
    )
    assert response.status_code == 202
    assert bytes(WebhookReceipt.objects.get().body) == body


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_body_is_415_even_when_signed(coding):
    # Signed over the compressed bytes, or over the inflated ones: either
    # way it is refused before anything is inflated.
    body = gzip.compress(signing.event_body())
    headers = {**signing.github_headers(body), "Content-Encoding": coding}
    response = post("/webhooks/github/", body, headers)
    assert response.status_code == 415
    assert problem(response)["type"].endswith("/webhook-unsupported-encoding")
    assert not WebhookReceipt.objects.exists()
    assert not WebhookRejection.objects.exists()


def test_an_encoding_refusal_never_echoes_the_header():
    # Unauthenticated text stays out of the answer, the log and the signals.
    body = signing.event_body()
    headers = {**signing.github_headers(body), "Content-Encoding": "x-<script>"}
    response = post("/webhooks/github/", body, headers)
    assert response.status_code == 415
    assert b"script" not in response.content


def test_an_identity_encoded_body_is_taken():
    body = signing.event_body()
    headers = {**signing.github_headers(body), "Content-Encoding": "identity"}
    assert post("/webhooks/github/", body, headers).status_code == 202


def test_a_chunked_body_the_server_did_not_end_is_411_never_an_empty_body():
    """Without Content-Length Django reads an empty body; under a WSGI server
    that does not end the de-chunked input (runserver), the body cannot be
    found: 411, not a 401 for the empty body's signature. Under gunicorn the
    body is read (tests/webhooks/test_views_gunicorn.py)."""
    body = signing.event_body()
    response = Client().post(
        "/webhooks/github/",
        body,
        content_type="application/json",
        headers=signing.github_headers(body),
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert response.status_code == 411
    assert problem(response)["type"].endswith("/webhook-length-required")
    assert not WebhookReceipt.objects.exists()
    assert not WebhookRejection.objects.exists()


def test_a_body_over_the_limit_is_413_by_content_length():
    body = b"x" * 65
    response = post("/webhooks/small/", body, signing.hmac_headers(body))
    assert response.status_code == 413
    assert problem(response)["type"].endswith("/webhook-too-large")
    assert not WebhookReceipt.objects.exists()
    assert not WebhookRejection.objects.exists()


def test_a_body_at_the_limit_is_accepted():
    body = b'{"pad": "' + b"x" * 53 + b'"}'
    assert len(body) == 64
    response = post("/webhooks/small/", body, signing.hmac_headers(body))
    assert response.status_code == 202


def test_an_unknown_source_is_404():
    response = post("/webhooks/nope/", b"{}", {})
    assert response.status_code == 404
    assert problem(response)["type"].endswith("/webhook-unknown-source")
    assert not WebhookRejection.objects.exists()


def test_only_post_is_allowed():
    assert Client().get("/webhooks/github/").status_code == 405


def test_a_url_without_its_trailing_slash_is_received_not_redirected(settings):
    # APPEND_SLASH would answer a POST to /webhooks/github with a redirect
    # that drops the body: providers do not follow it, and the delivery fails.
    settings.APPEND_SLASH = True
    body = signing.event_body()
    response = post("/webhooks/github", body, signing.github_headers(body))

    assert response.status_code == 202
    assert WebhookReceipt.objects.get().delivery_id == "evt_1"


def test_a_project_requiring_login_everywhere_still_receives_deliveries(settings):
    # Django's LoginRequiredMiddleware redirects every view not marked
    # login_not_required to the login page: providers never log in, and a
    # 302 fails each delivery.
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.contrib.auth.middleware.LoginRequiredMiddleware",
    ]
    body = signing.event_body()

    with_slash = post("/webhooks/github/", body, signing.github_headers(body))
    without = post("/webhooks/github", body, signing.github_headers(body))

    assert (with_slash.status_code, without.status_code) == (202, 200)
    assert WebhookReceipt.objects.get().delivery_id == "evt_1"


def test_no_debug_setting_or_header_bypasses_verification(settings):
    settings.DEBUG = True
    body = signing.event_body()
    headers = {
        "X-GitHub-Delivery": "evt_1",
        "X-GitHub-Event": "push",
        "X-Hub-Signature-256": "sha256=" + "0" * 64,
        "X-Webhook-Secret": signing.GITHUB_SECRET,
        "X-Skip-Verification": "1",
    }
    assert post("/webhooks/github/", body, headers).status_code == 401


def test_a_source_without_secrets_refuses_everything(webhook_sources):
    webhook_sources.WEBHOOKS = {
        "SOURCES": {"github": {"VERIFIER": "github", "SECRETS": []}}
    }
    body = signing.event_body()
    response = post("/webhooks/github/", body, signing.github_headers(body))
    # A configuration error, not the sender's: 5xx, so it resends once fixed.
    assert response.status_code == 500
    assert problem(response)["type"].endswith("/webhook-misconfigured")
    assert not WebhookReceipt.objects.exists()


def test_a_rotated_secret_is_accepted():
    body = signing.event_body()
    headers = signing.stripe_headers(body, secret=signing.STRIPE_OLD_SECRET)
    assert post("/webhooks/stripe/", body, headers).status_code == 202


def test_the_receipt_keeps_when_the_event_happened():
    created = 1_700_000_000
    body = signing.event_body(created=created)
    post("/webhooks/stripe/", body, signing.stripe_headers(body))
    occurred_at = WebhookReceipt.objects.get().occurred_at
    assert occurred_at.timestamp() == created
    assert occurred_at < WebhookReceipt.objects.get().received_at - timedelta(days=1)


header_names = st.sampled_from(
    [
        "X-Hub-Signature-256",
        "X-GitHub-Delivery",
        "X-GitHub-Event",
        "Stripe-Signature",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "X-Signature",
        "X-Webhook-Id",
        "X-Webhook-Event",
        "Content-Length",
        "Content-Encoding",
    ]
)
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=0xFF))


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    source=st.sampled_from(["github", "stripe", "standard", "hmac", "small"]),
    headers=st.dictionaries(header_names, header_values, max_size=6),
    body=st.binary(max_size=200),
)
def test_random_requests_never_get_a_5xx(source, headers, body):
    # A Content-Length beyond the body makes a server wait for the rest, and
    # the test client raise instead: not a case this test can play.
    assume(not _declares_more_than(headers, body))
    response = post(f"/webhooks/{source}/", body, headers)
    assert response.status_code in (400, 401, 413, 415)
    assert not WebhookReceipt.objects.exists()


def _declares_more_than(headers, body):
    try:
        # int() as Django's WSGIRequest parses CONTENT_LENGTH.
        return int(headers.get("Content-Length", "")) > len(body)
    except ValueError:
        return False


@pytest.mark.parametrize(
    ("secrets", "forged_with"),
    [
        ("whsec_abc", "w"),  # a bare string, iterated one character at a time
        ([""], ""),  # an unset environment variable
        (["  "], "  "),
    ],
)
def test_a_misconfigured_source_refuses_even_a_delivery_its_secret_would_accept(
    webhook_sources, caplog, secrets, forged_with
):
    webhook_sources.WEBHOOKS["SOURCES"]["github"]["SECRETS"] = secrets
    body = signing.event_body()

    response = post(
        "/webhooks/github/", body, signing.github_headers(body, secret=forged_with)
    )

    assert response.status_code == 500
    assert problem(response)["type"].endswith("/webhook-misconfigured")
    assert not WebhookReceipt.objects.exists()
    [log] = [r for r in caplog.records if r.name == "webhooks"]
    assert log.levelname == "ERROR"
    assert "'github'" in log.getMessage()
    assert "SECRETS" in log.getMessage()


@pytest.mark.parametrize("bad", [{"RETENTION": 0}, {"MAX_RETRIES": -1}])
def test_a_bad_webhooks_value_refuses_deliveries_as_a_problem(
    webhook_sources, caplog, bad
):
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, **bad}

    response = deliver()

    assert response.status_code == 500
    assert problem(response)["type"].endswith("/webhook-misconfigured")
    assert not WebhookReceipt.objects.exists()
    [log] = [r for r in caplog.records if r.name == "webhooks"]
    assert next(iter(bad)) in log.getMessage()


def test_a_misconfigured_source_leaves_the_other_sources_working(webhook_sources):
    webhook_sources.WEBHOOKS["SOURCES"]["stripe"]["SECRETS"] = "whsec_x"
    assert deliver().status_code == 202


@pytest.mark.parametrize("timestamp_header", [True, 300])
def test_a_timestamp_option_that_names_no_header_fails_that_source_closed(
    webhook_sources, timestamp_header
):
    # Read as a switch, it named no header: the source's validation crashed
    # on it, and the intake answered Django's HTML 500.
    webhook_sources.WEBHOOKS["SOURCES"]["hmac"]["OPTIONS"] = {
        "TIMESTAMP_HEADER": timestamp_header
    }
    body = signing.event_body()

    response = post("/webhooks/hmac/", body, signing.hmac_headers(body))

    assert response.status_code == 500
    assert problem(response)["type"].endswith("/webhook-misconfigured")
    assert deliver().status_code == 202


class RegionalVerifier(HmacVerifier):
    """A custom verifier that refuses its options when made, as the bundled
    publishers refuse theirs."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        raise ValueError("OPTIONS['REGION'] must be 'eu' or 'us'")


def test_a_verifier_that_refuses_its_options_when_made_fails_that_source_closed(
    webhook_sources, caplog
):
    # Its ValueError crashed the source's validation: the intake answered
    # Django's HTML 500 (and manage.py check crashed, tests/webhooks/
    # test_checks.py).
    webhook_sources.WEBHOOKS["SOURCES"]["hmac"]["VERIFIER"] = (
        f"{__name__}.RegionalVerifier"
    )
    body = signing.event_body()

    response = post("/webhooks/hmac/", body, signing.hmac_headers(body))

    assert response.status_code == 500
    assert problem(response)["type"].endswith("/webhook-misconfigured")
    assert "'eu' or 'us'" in caplog.text
    assert deliver().status_code == 202


def test_an_option_that_is_no_name_fails_that_source_closed(webhook_sources):
    # Reporting it as unknown crashed the source's validation: Django's HTML
    # 500 at the intake instead of the source's refusal.
    webhook_sources.WEBHOOKS["SOURCES"]["hmac"]["OPTIONS"] = {1: "X-Id"}
    body = signing.event_body()

    response = post("/webhooks/hmac/", body, signing.hmac_headers(body))

    assert response.status_code == 500
    assert problem(response)["type"].endswith("/webhook-misconfigured")
    assert deliver().status_code == 202


def test_a_fixed_source_is_rebuilt_when_the_settings_change(webhook_sources):
    webhook_sources.WEBHOOKS = {
        "SOURCES": {"github": {"VERIFIER": "github", "SECRETS": [""]}}
    }
    assert deliver().status_code == 500
    webhook_sources.WEBHOOKS = {
        "SOURCES": {
            "github": {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]}
        }
    }
    assert deliver().status_code == 202


class LaxIdVerifier(HmacVerifier):
    """A verifier of one's own that takes its id and event type as they come."""

    def verify(self, body, headers):
        checked = {**headers, "X-Webhook-Id": "id", "X-Webhook-Event": "type"}
        return replace(
            super().verify(body, checked),
            delivery_id=headers.get("X-Webhook-Id"),
            event_type=headers.get("X-Webhook-Event"),
        )


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-Webhook-Id", None),
        ("X-Webhook-Id", ""),
        ("X-Webhook-Id", " "),
        ("X-Webhook-Id", "x" * 256),
        ("X-Webhook-Id", "evt\x001"),
        ("X-Webhook-Event", None),
        ("X-Webhook-Event", "x" * 256),
    ],
)
def test_a_custom_verifiers_delivery_id_and_type_are_checked_too(
    webhook_sources, header, value
):
    # Stored as they came, an empty id made every later delivery without one
    # a duplicate, never processed; a long one, a NUL or none was a 500.
    webhook_sources.WEBHOOKS["SOURCES"]["lax"] = {
        "VERIFIER": f"{__name__}.LaxIdVerifier",
        "SECRETS": [signing.HMAC_SECRET],
    }
    body = signing.event_body()
    headers = signing.hmac_headers(body)
    del headers[header]
    if value is not None:
        headers[header] = value

    response = post("/webhooks/lax/", body, headers)

    assert response.status_code == 401
    assert problem(response)["type"].endswith("/webhook-verifier-error")
    assert not WebhookReceipt.objects.exists()
    # What the bundled verifiers take passes.
    assert post("/webhooks/lax/", body, signing.hmac_headers(body)).status_code == 202


def test_a_nul_in_a_stored_header_is_kept_escaped_never_a_500(handler_registry):
    # Headers are unsigned: anyone resending a captured body can put a NUL in
    # one, and a jsonb column refuses it.
    body = signing.event_body()
    client = Client(raise_request_exception=False)
    response = client.post(
        "/webhooks/github/",
        data=body,
        content_type="application/json\x00",
        headers=signing.github_headers(body),
    )

    assert response.status_code == 202
    receipt = WebhookReceipt.objects.get()
    assert receipt.headers["Content-Type"] == "application/json\\x00"
    seen = []
    handlers.on("github", "push")(lambda event: seen.append(event.data["id"]))
    processing.process(receipt.pk)  # the body reads as the intake read it
    assert seen == ["evt_1"]


def test_a_github_delivery_signed_with_sha1_only_names_the_missing_sha256_header():
    # GitHub sends both; a proxy or an old GitHub Enterprise sending only the
    # SHA-1 header is told which header it lacks, and nothing is stored.
    body = signing.event_body()
    sha256 = signing.github_headers(body)
    sha1 = "sha1=" + hmac.new(signing.GITHUB_SECRET.encode(), body, "sha1").hexdigest()
    headers = {**sha256, "X-Hub-Signature": sha1}
    del headers["X-Hub-Signature-256"]

    response = post("/webhooks/github/", body, headers)

    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"
    assert problem(response)["type"].endswith("/webhook-missing-header")
    assert problem(response)["detail"] == (
        "X-Hub-Signature-256 header missing; "
        "X-Hub-Signature (SHA-1) alone is not accepted"
    )
    assert not WebhookReceipt.objects.exists()
