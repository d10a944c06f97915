import pytest

from tests.webhooks import signing
from tests.webhooks.verifiers.contract import VerifierContract
from webhooks.verifiers import base

# GitHub's documented example ("Validating webhook deliveries").
DOCUMENTED_SIGNATURE = (
    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)


class TestGitHubVerifier(VerifierContract):
    verifier = "github"
    secret = signing.GITHUB_SECRET
    other_secret = "another secret"
    timestamped = False
    signed_event_type = "push"

    def sign(self, body, *, secret=None, delivery_id="evt_1", timestamp=None):
        return signing.github_headers(body, secret or self.secret, delivery_id)

    def test_the_documented_example_verifies_and_its_text_body_is_refused(self):
        headers = {
            "X-Hub-Signature-256": DOCUMENTED_SIGNATURE,
            "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            "X-GitHub-Event": "push",
        }
        # The signature checks out; "Hello, World!" is then no JSON event.
        self.refused(base.MALFORMED_BODY, b"Hello, World!", headers)
        self.refused(base.BAD_SIGNATURE, b"Hello, World?", headers)

    def test_a_json_delivery_says_its_id_and_event_and_no_time(self):
        body = b'{"zen": "Keep it logically awesome."}'
        headers = signing.github_headers(body, delivery_id="72d3", event="ping")
        delivery = self.make().authenticate(body, headers)
        assert (delivery.delivery_id, delivery.event_type) == ("72d3", "ping")
        assert delivery.occurred_at is None

    def test_our_helper_reproduces_the_documented_signature(self):
        headers = signing.github_headers(b"Hello, World!")
        assert headers["X-Hub-Signature-256"] == DOCUMENTED_SIGNATURE

    def test_sign_reproduces_the_documented_signature(self):
        headers = self.make().sign(
            b"Hello, World!", delivery_id="72d3", event_type="push"
        )
        assert headers["X-Hub-Signature-256"] == DOCUMENTED_SIGNATURE

    @pytest.mark.parametrize(
        "value", ["757107ea", "sha1=757107ea", "sha256=", "sha256=zz", "SHA256=ab"]
    )
    def test_a_malformed_signature_is_refused(self, value):
        headers = {**self.sign(b"x"), "X-Hub-Signature-256": value}
        with pytest.raises(base.VerificationFailed):
            self.make().authenticate(b"x", headers)

    def test_a_signature_in_upper_case_hex_verifies(self):
        body = self.body()
        headers = self.sign(body)
        headers["X-Hub-Signature-256"] = (
            "sha256=" + headers["X-Hub-Signature-256"].removeprefix("sha256=").upper()
        )
        assert self.make().authenticate(body, headers)
