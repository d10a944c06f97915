"""Generic HMAC-SHA256 of the body (or ``<timestamp>.<body>``), hex or base64."""

import base64
import binascii
import hashlib
import hmac

from .base import BAD_SIGNATURE, MALFORMED_HEADER, BaseVerifier, Delivery
from .base import VerificationFailed as Failed

ENCODINGS = ("hex", "base64")
BODIES = ("json", "raw")


class HmacVerifier(BaseVerifier):
    # The id and event headers are never signed (the timestamp, when set, is):
    # signs_delivery_id stays False, so the intake dedupes on the body too.
    option_defaults = {
        "SIGNATURE_HEADER": "X-Signature",
        "ID_HEADER": "X-Webhook-Id",
        "EVENT_HEADER": "X-Webhook-Event",
        # When set, the signed text is "<timestamp>.<body>" within TOLERANCE.
        "TIMESTAMP_HEADER": None,
        "ENCODING": "hex",
        # Text before the signature in its header, e.g. "sha256=".
        "PREFIX": "",
        # "json": the body must be a JSON object (or a payload= form), refused
        # with 400 otherwise, so handlers always get event.data. "raw": any
        # bytes; handlers read event.receipt.body.
        "BODY": "json",
    }

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        names = ("ID_HEADER", "EVENT_HEADER", "TIMESTAMP_HEADER", "SIGNATURE_HEADER")
        self.headers = tuple(self.options[n] for n in names if self.options[n])
        self.signature_headers = (self.options["SIGNATURE_HEADER"],)
        # Only a signed timestamp bounds how long a captured body verifies.
        self.signs_time = bool(self.options["TIMESTAMP_HEADER"])

    def check(self):
        problems = super().check()
        if self.options["ENCODING"] not in ENCODINGS:
            problems.append("OPTIONS['ENCODING'] must be 'hex' or 'base64'")
        for name in ("SIGNATURE_HEADER", "ID_HEADER", "EVENT_HEADER"):
            if not isinstance(self.options[name], str) or not self.options[name]:
                problems.append(f"OPTIONS['{name}'] must be a header name")
        timestamp_header = self.options["TIMESTAMP_HEADER"]
        if timestamp_header is not None and not isinstance(timestamp_header, str):
            # True reads as a switch: it would name no header to read.
            problems.append("OPTIONS['TIMESTAMP_HEADER'] must be a header name or None")
        if not isinstance(self.options["PREFIX"], str):
            problems.append("OPTIONS['PREFIX'] must be a string")
        if self.options["BODY"] not in BODIES:
            problems.append("OPTIONS['BODY'] must be 'json' or 'raw'")
        return problems

    def verify(self, body, headers):
        options = self.options
        value = self.header(headers, options["SIGNATURE_HEADER"])
        if not value.startswith(options["PREFIX"]):
            raise Failed(MALFORMED_HEADER, "signature prefix missing")
        candidate = self._decode(value[len(options["PREFIX"]) :])
        timestamp = None
        if options["TIMESTAMP_HEADER"]:
            timestamp = self.header(headers, options["TIMESTAMP_HEADER"])
            self.timestamp(timestamp)
        expected = [_digest(secret, timestamp, body) for secret in self.secrets]
        if not self.matches(expected, [candidate]):
            raise Failed(BAD_SIGNATURE)
        id_header, event_header = options["ID_HEADER"], options["EVENT_HEADER"]
        delivery = Delivery(
            delivery_id=self.identifier(self.header(headers, id_header), id_header),
            event_type=self.identifier(
                self.header(headers, event_header), event_header
            ),
        )
        if options["BODY"] == "json":
            self.json_object(body, headers)
        return delivery

    def sign(self, body, *, delivery_id, event_type, secret=None, timestamp=None):
        options = self.options
        secret, signed_at = self.signing(secret, timestamp)
        stamp = signed_at if options["TIMESTAMP_HEADER"] else None
        digest = _digest(secret, stamp, body)
        if options["ENCODING"] == "base64":
            encoded = base64.b64encode(digest).decode()
        else:
            encoded = digest.hex()
        headers = {
            options["SIGNATURE_HEADER"]: options["PREFIX"] + encoded,
            options["ID_HEADER"]: delivery_id,
            options["EVENT_HEADER"]: event_type,
        }
        if stamp is not None:
            headers[options["TIMESTAMP_HEADER"]] = stamp
        return headers

    def _decode(self, text):
        try:
            if self.options["ENCODING"] == "base64":
                return base64.b64decode(text, validate=True)
            return bytes.fromhex(text)
        except (binascii.Error, ValueError):
            raise Failed(MALFORMED_HEADER, "signature is not encoded") from None


def _digest(secret: str, timestamp: str | None, body: bytes) -> bytes:
    """HMAC-SHA256 of the body, or of ``<timestamp>.<body>`` when timestamped."""
    signed = body if timestamp is None else timestamp.encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).digest()
