import base64
import hashlib
import hmac
import time

import pytest

from tests.webhooks import signing
from tests.webhooks.verifiers.contract import VerifierContract
from webhooks.conf import verifier_class
from webhooks.verifiers import base


class TestHmacVerifier(VerifierContract):
    verifier = "hmac"
    secret = signing.HMAC_SECRET
    other_secret = "another-hmac-secret"
    timestamped = False
    signed_event_type = "ping"

    def sign(self, body, *, secret=None, delivery_id="evt_1", timestamp=None):
        return signing.hmac_headers(body, secret or self.secret, delivery_id)

    def test_a_non_hex_signature_is_refused(self):
        headers = {**self.sign(b"x"), "X-Signature": "not hex"}
        self.refused(base.MALFORMED_HEADER, b"x", headers)


class TestHmacVerifierBase64WithTimestamp(VerifierContract):
    """Every option changed: names, base64, a prefix and a signed timestamp."""

    verifier = "webhooks.verifiers.hmac.HmacVerifier"
    secret = "b64-secret"
    other_secret = "b64-secret-old"
    signed_event_type = "ping"
    options = {
        "SIGNATURE_HEADER": "X-Sig",
        "ID_HEADER": "X-Id",
        "EVENT_HEADER": "X-Kind",
        "TIMESTAMP_HEADER": "X-Time",
        "ENCODING": "base64",
        "PREFIX": "sha256=",
    }

    def sign(self, body, *, secret=None, delivery_id="evt_1", timestamp=None):
        timestamp = str(int(time.time()) if timestamp is None else timestamp)
        digest = hmac.new(
            (secret or self.secret).encode(),
            timestamp.encode() + b"." + body,
            hashlib.sha256,
        ).digest()
        return {
            "X-Sig": "sha256=" + base64.b64encode(digest).decode(),
            "X-Id": delivery_id,
            "X-Kind": "ping",
            "X-Time": timestamp,
        }

    @pytest.mark.parametrize("value", ["sha256=@@@", "c2lnbmF0dXJl", "sha256="])
    def test_a_malformed_signature_is_refused(self, value):
        body = self.body()
        headers = {**self.sign(body), "X-Sig": value}
        with pytest.raises(base.VerificationFailed):
            self.make().authenticate(body, headers)


class TestHmacVerifierRawBody:
    """OPTIONS BODY "raw": for providers whose bodies are not JSON."""

    def make(self, body_option):
        return verifier_class("hmac")(
            secrets=[signing.HMAC_SECRET], options={"BODY": body_option}
        )

    @pytest.mark.parametrize("body", [b"Hello, World!", b"\xff\xfe", b"[1]", b""])
    def test_any_signed_body_verifies(self, body):
        delivery = self.make("raw").authenticate(body, signing.hmac_headers(body))
        assert delivery.delivery_id == "evt_1"

    def test_a_tampered_body_is_still_refused(self):
        headers = signing.hmac_headers(b"Hello, World!")
        with pytest.raises(base.VerificationFailed) as caught:
            self.make("raw").authenticate(b"Hello, World?", headers)
        assert caught.value.reason == base.BAD_SIGNATURE

    @pytest.mark.parametrize("value", ["xml", "JSON", None, ""])
    def test_body_is_json_or_raw(self, value):
        assert self.make(value).check() == ["OPTIONS['BODY'] must be 'json' or 'raw'"]
