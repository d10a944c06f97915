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

    def sign(self, body, *, secret=None, delivery_id="evt_1", timestamp=None):
        return signing.github_headers(body, secret or self.secret, delivery_id)

    def test_the_documented_example_verifies(self):
        headers = {
            "X-Hub-Signature-256": DOCUMENTED_SIGNATURE,
            "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            "X-GitHub-Event": "push",
        }
        delivery = self.make().authenticate(b"Hello, World!", headers)
        assert delivery.delivery_id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
        assert delivery.event_type == "push"
        assert delivery.occurred_at is None

    def test_our_helper_reproduces_the_documented_signature(self):
        headers = signing.github_headers(b"Hello, World!")
        assert headers["X-Hub-Signature-256"] == DOCUMENTED_SIGNATURE

    @pytest.mark.parametrize(
        "value", ["757107ea", "sha1=757107ea", "sha256=", "sha256=zz", "SHA256=ab"]
    )
    def test_a_malformed_signature_is_refused(self, value):
        headers = {**self.sign(b"x"), "X-Hub-Signature-256": value}
        with pytest.raises(base.VerificationFailed):
            self.make().authenticate(b"x", headers)

    def test_a_signature_in_upper_case_hex_verifies(self):
        headers = {
            "X-Hub-Signature-256": "sha256=" + DOCUMENTED_SIGNATURE[7:].upper(),
            "X-GitHub-Delivery": "d1",
            "X-GitHub-Event": "push",
        }
        assert self.make().authenticate(b"Hello, World!", headers)
