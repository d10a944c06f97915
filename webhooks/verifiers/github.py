"""GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC of the body>``."""

import hashlib
import hmac
from datetime import timedelta

from .base import (
    BAD_SIGNATURE,
    MALFORMED_HEADER,
    MISSING_HEADER,
    BaseVerifier,
    Delivery,
)
from .base import VerificationFailed as Failed


class GitHubVerifier(BaseVerifier):
    headers = ("X-GitHub-Delivery", "X-GitHub-Event", "X-Hub-Signature-256")
    signature_headers = ("X-Hub-Signature-256", "X-Hub-Signature")
    # No signed time (signs_time is False). GitHub never retries by itself;
    # its "Redeliver" reaches deliveries of the past three days.
    retry_horizon = timedelta(days=3)

    def verify(self, body, headers):
        if not headers.get("X-Hub-Signature-256") and headers.get("X-Hub-Signature"):
            # The SHA-1 signature alone is never taken (GitHub sends both):
            # say which header is missing, not just that one is.
            raise Failed(
                MISSING_HEADER,
                "X-Hub-Signature-256 header missing; "
                "X-Hub-Signature (SHA-1) alone is not accepted",
            )
        scheme, _, signature = self.header(headers, "X-Hub-Signature-256").partition(
            "="
        )
        if scheme != "sha256" or not signature:
            raise Failed(MALFORMED_HEADER, "X-Hub-Signature-256 malformed")
        # GitHub signs the body only, no timestamp and no header: a replay is
        # caught by its delivery id or, under a fresh one, by its body's hash
        # (signs_delivery_id is False).
        expected = [_digest(secret, body).encode() for secret in self.secrets]
        candidate = signature.lower().encode()
        if not self.matches(expected, [candidate]):
            raise Failed(BAD_SIGNATURE)
        delivery = Delivery(
            delivery_id=self.identifier(
                self.header(headers, "X-GitHub-Delivery"), "X-GitHub-Delivery"
            ),
            event_type=self.identifier(
                self.header(headers, "X-GitHub-Event"), "X-GitHub-Event"
            ),
        )
        # A JSON object, or the form GitHub sends for "form" hooks.
        self.json_object(body, headers)
        return delivery

    def sign(self, body, *, delivery_id, event_type, secret=None, timestamp=None):
        secret, _ = self.signing(secret, timestamp)
        return {
            "X-Hub-Signature-256": "sha256=" + _digest(secret, body),
            "X-GitHub-Delivery": delivery_id,
            "X-GitHub-Event": event_type,
        }


def _digest(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
