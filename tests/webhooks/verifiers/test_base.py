import json

import pytest

from tests.webhooks import signing
from webhooks.conf import verifier_class
from webhooks.verifiers import base
from webhooks.verifiers.base import BaseVerifier, Delivery, VerificationFailed


def test_verify_must_be_implemented_and_says_so():
    with pytest.raises(NotImplementedError, match=r"verify\(body, headers\)"):
        BaseVerifier(secrets=["s"]).verify(b"", {})


def test_an_unexpected_error_inside_verify_fails_closed(caplog):
    class Broken(BaseVerifier):
        def verify(self, body, headers):
            raise KeyError("boom")

    with pytest.raises(VerificationFailed) as caught:
        Broken(secrets=["s"]).authenticate(b"", {})
    assert caught.value.reason == base.VERIFIER_ERROR
    assert "Broken raised while verifying" in caplog.text


def test_verify_must_return_a_delivery():
    class Sloppy(BaseVerifier):
        def verify(self, body, headers):
            return True

    with pytest.raises(VerificationFailed):
        Sloppy(secrets=["s"]).authenticate(b"", {})


def test_failure_reasons_are_a_closed_set():
    with pytest.raises(ValueError):
        VerificationFailed("something-new")


def test_matches_compares_every_pair():
    assert BaseVerifier.matches([b"a", b"b"], [b"c", b"b"])
    assert not BaseVerifier.matches([b"a"], [b"b", b"c"])
    assert not BaseVerifier.matches([], [b"a"])


def test_unknown_options_are_reported():
    verifier = BaseVerifier(secrets=["s"], options={"NOPE": 1})
    assert verifier.check() == ["unknown OPTIONS: NOPE"]


def test_a_delivery_is_a_plain_value():
    assert Delivery("d", "t") == Delivery("d", "t", None)


@pytest.mark.parametrize(
    ("verifier", "event", "detail"),
    [
        ("stripe", {"id": "evt_1"}, "event type missing"),
        ("stripe", {"id": "evt_1", "type": None}, "event type missing"),
        ("stripe", {"type": "a.b"}, "event id missing"),
        ("stripe", {"id": 5, "type": "a.b"}, "event id malformed"),
        ("stripe", {"id": "evt_1", "type": "a b"}, "event type malformed"),
        ("standard", {"data": {}}, "event type missing"),
        ("standard", {"type": 5}, "event type malformed"),
        ("standard", {"type": ["a.b"]}, "event type malformed"),
    ],
)
def test_a_signed_body_says_whether_its_id_or_type_is_missing_or_malformed(
    verifier, event, detail
):
    # The sender's fix differs: add the field, or send it as a string.
    body = json.dumps(event).encode()
    if verifier == "stripe":
        secret, headers = signing.STRIPE_SECRET, signing.stripe_headers(body)
    else:
        secret, headers = signing.STANDARD_SECRET, signing.standard_headers(body)
    made = verifier_class(verifier)(secrets=[secret])
    with pytest.raises(base.VerificationFailed) as caught:
        made.authenticate(body, headers)
    assert (caught.value.reason, caught.value.detail) == (base.MALFORMED_BODY, detail)
