import base64
import json
import time
from datetime import UTC, datetime

import pytest
import standardwebhooks

from tests.webhooks import signing
from tests.webhooks.verifiers.contract import VerifierContract
from webhooks.verifiers import base
from webhooks.verifiers.standard import StandardWebhooksVerifier, decode_secret


class TestStandardWebhooksVerifier(VerifierContract):
    verifier = "standard"
    secret = signing.STANDARD_SECRET
    other_secret = signing.STANDARD_OLD_SECRET

    def sign(self, body, *, secret=None, delivery_id="evt_1", timestamp=None):
        return signing.standard_headers(
            body, secret or self.secret, delivery_id, timestamp
        )

    def test_the_library_accepts_what_we_accept(self):
        body = self.body("msg_lib")
        headers = self.sign(body, delivery_id="msg_lib")
        payload = standardwebhooks.Webhook(self.secret).verify(body, headers)
        delivery = self.make().authenticate(body, headers)
        assert delivery.delivery_id == "msg_lib"
        assert delivery.event_type == payload["type"]
        assert delivery.occurred_at == datetime.fromisoformat(payload["timestamp"])

    def test_the_library_accepts_what_sign_makes(self):
        body = self.body()
        headers = self.signed_by_verifier(body, delivery_id="msg_signed")
        payload = standardwebhooks.Webhook(self.secret).verify(body, headers)
        assert headers["webhook-id"] == "msg_signed"
        assert payload["type"] == "thing.happened"

    def test_one_valid_signature_among_several_verifies(self):
        body = self.body()
        headers = self.sign(body)
        other = self.sign(body, secret=self.other_secret)["webhook-signature"]
        headers["webhook-signature"] = (
            f"v1a,{base64.b64encode(b'x' * 32).decode()} {other} "
            + headers["webhook-signature"]
        )
        assert self.make().authenticate(body, headers)

    @pytest.mark.parametrize("other", ["v1,not base64!", "v1,abc", "v1,", "v1"])
    def test_a_valid_signature_beside_an_undecodable_one_verifies(self, other):
        # The library tries each signature listed and takes any that matches.
        body = self.body()
        headers = self.sign(body)
        headers["webhook-signature"] = f"{other} {headers['webhook-signature']}"
        standardwebhooks.Webhook(self.secret).verify(body, headers)
        assert self.make().authenticate(body, headers)

    @pytest.mark.parametrize("value", ["v1,not base64!", "v1,abc", "v2,abcd", "v1"])
    def test_a_signature_that_is_not_strict_base64_is_refused(self, value):
        body = self.body()
        headers = {**self.sign(body), "webhook-signature": value}
        self.refused(base.MALFORMED_HEADER, body, headers)

    def test_the_event_time_comes_from_the_payload_not_the_header(self):
        # A retry re-signs with a new webhook-timestamp; the event is older.
        created = int(time.time()) - 3600
        body = signing.event_body(created=created)
        delivery = self.make().authenticate(body, self.sign(body))
        assert delivery.occurred_at == datetime.fromtimestamp(created, UTC)

    def test_clerks_timestamp_in_unix_milliseconds_is_the_event_time(self):
        # Clerk delivers through Svix with "timestamp": <Unix ms>, not the
        # spec's ISO 8601 string: every one of its events was refused (400).
        body = json.dumps(
            {"type": "user.created", "object": "event", "timestamp": 1654012591835}
        ).encode()
        headers = {
            name.replace("webhook-", "svix-"): value
            for name, value in self.sign(body).items()
        }
        delivery = self.make().authenticate(body, headers)
        assert delivery.occurred_at == datetime(
            2022, 5, 31, 15, 56, 31, 835000, tzinfo=UTC
        )

    def test_a_signed_event_without_type_is_a_bad_body(self):
        body = json.dumps({"data": {}}).encode()
        self.refused(base.MALFORMED_BODY, body, self.sign(body))

    @pytest.mark.parametrize(
        "secret", ["whsec_", "whsec_abc", "whsec_not base64", "c2VjcmV0", None]
    )
    def test_secrets_are_decoded_strictly(self, secret):
        assert decode_secret(secret) is None

    def test_a_verifier_whose_secrets_do_not_decode_refuses(self):
        body = self.body()
        self.refused(
            base.NO_SECRET, body, self.sign(body), self.make(secrets=["whsec_abc"])
        )


@pytest.mark.parametrize("size", [16, 32, 64])
def test_a_secret_without_its_base64_padding_verifies_as_the_library_does(size):
    # Dashboards and copy-pastes drop the "=": the library restores it.
    key = bytes(range(size))
    padded = "whsec_" + base64.b64encode(key).decode()
    unpadded = padded.rstrip("=")
    assert unpadded != padded
    body = json.dumps({"type": "thing.happened"}).encode()
    signed_at = datetime.fromtimestamp(int(time.time()), UTC)
    headers = {
        "webhook-id": "msg_unpadded",
        "webhook-timestamp": str(int(signed_at.timestamp())),
        "webhook-signature": standardwebhooks.Webhook(unpadded).sign(
            "msg_unpadded", signed_at, body
        ),
    }
    standardwebhooks.Webhook(unpadded).verify(body, headers)
    assert decode_secret(unpadded) == key
    verifier = StandardWebhooksVerifier(secrets=[unpadded])
    assert verifier.check() == []
    assert verifier.authenticate(body, headers).delivery_id == "msg_unpadded"
