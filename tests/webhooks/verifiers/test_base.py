import pytest

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
