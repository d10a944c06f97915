import hashlib
import hmac
import json
import time
from datetime import UTC, datetime

import pytest
import stripe

from tests.webhooks import signing
from tests.webhooks.verifiers.contract import VerifierContract
from webhooks.verifiers import base


class TestStripeVerifier(VerifierContract):
    verifier = "stripe"
    secret = signing.STRIPE_SECRET
    other_secret = signing.STRIPE_OLD_SECRET

    def sign(self, body, *, secret=None, delivery_id="evt_1", timestamp=None):
        return signing.stripe_headers(body, secret or self.secret, timestamp)

    def test_the_library_accepts_what_we_accept(self):
        body = self.body("evt_lib")
        headers = self.sign(body)
        event = stripe.Webhook.construct_event(
            body.decode(), headers["Stripe-Signature"], self.secret
        )
        delivery = self.make().authenticate(body, headers)
        assert delivery.delivery_id == event.id == "evt_lib"
        assert delivery.event_type == event.type
        assert int(delivery.occurred_at.timestamp()) == event.created

    def test_the_library_accepts_what_sign_makes(self):
        body = self.body("evt_signed")
        headers = self.signed_by_verifier(body, delivery_id="evt_signed")
        event = stripe.Webhook.construct_event(
            body.decode(), headers["Stripe-Signature"], self.secret
        )
        assert event.id == "evt_signed"

    def test_the_whole_whsec_string_is_the_key(self):
        body = self.body()
        t = str(int(time.time()))
        digest = hmac.new(
            self.secret.encode(), f"{t}.".encode() + body, hashlib.sha256
        ).hexdigest()
        headers = {"Stripe-Signature": f"t={t},v1={digest}"}
        assert self.make().authenticate(body, headers)

    def test_one_valid_signature_among_several_verifies(self):
        body = self.body()
        header = self.sign(body)["Stripe-Signature"]
        t, v1 = header.split(",")
        headers = {"Stripe-Signature": f"{t},v1={'0' * 64},{v1},v0=abc"}
        assert self.make().authenticate(body, headers)

    @pytest.mark.parametrize(
        "value",
        [
            "v1=abc",
            "t=123",
            "t=abc,v1=abc",
            "t=1,t=2,v1=abc",
            "garbage",
            "t=-5,v1=ab",
            "t=99999999999999999999,v1=ab",
        ],
    )
    def test_a_malformed_header_is_refused(self, value):
        self.refused(base.MALFORMED_HEADER, self.body(), {"Stripe-Signature": value})

    def test_only_v0_signatures_are_refused(self):
        body = self.body()
        header = self.sign(body)["Stripe-Signature"].replace("v1=", "v0=")
        self.refused(base.MALFORMED_HEADER, body, {"Stripe-Signature": header})

    @pytest.mark.parametrize(
        "event", [{"type": "a.b"}, {"id": "", "type": "a.b"}, {"id": 5, "type": "x"}]
    )
    def test_a_signed_event_without_id_or_type_is_a_bad_body(self, event):
        body = json.dumps(event).encode()
        self.refused(base.MALFORMED_BODY, body, self.sign(body))

    def test_a_thin_event_with_an_iso_created_verifies(self):
        # Event destinations' thin events (API v2) say when in ISO 8601, not
        # Unix seconds; the library reads them under the same signature.
        body = json.dumps(
            {
                "id": "evt_test_65R9Ijk8Z8SSmmEXfvl",
                "object": "v2.core.event",
                "type": "v1.billing.meter.error_report_triggered",
                "livemode": False,
                "created": "2024-09-17T06:20:52.246Z",
                "related_object": {
                    "id": "mtr_123",
                    "type": "billing.meter",
                    "url": "/v1/billing/meters/mtr_123",
                },
            }
        ).encode()
        headers = self.sign(body)
        notification = stripe.StripeClient("sk_test_x").parse_event_notification(
            body, headers["Stripe-Signature"], self.secret
        )

        delivery = self.make().authenticate(body, headers)

        assert delivery.delivery_id == notification.id
        assert delivery.event_type == notification.type
        assert delivery.occurred_at == datetime(
            2024, 9, 17, 6, 20, 52, 246000, tzinfo=UTC
        )
