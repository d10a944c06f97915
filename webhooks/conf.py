"""The WEBHOOKS settings object."""

from datetime import timedelta

from idempotency.conf import AppSettings

# Short names for the bundled verifiers; any other value is a dotted path.
VERIFIERS = {
    "github": "webhooks.verifiers.github.GitHubVerifier",
    "stripe": "webhooks.verifiers.stripe.StripeVerifier",
    "standard": "webhooks.verifiers.standard.StandardWebhooksVerifier",
    "hmac": "webhooks.verifiers.hmac.HmacVerifier",
}

# What one entry of WEBHOOKS["SOURCES"] may say, with the defaults.
SOURCE_DEFAULTS = {
    # Short name (see VERIFIERS) or dotted path to a BaseVerifier subclass.
    "VERIFIER": None,
    # Every secret currently valid, newest first; two during a rotation.
    "SECRETS": (),
    # Seconds a signed timestamp may lie in the past or the future.
    "TOLERANCE": 300,
    # Bodies larger than this many bytes are refused (413) unread.
    "MAX_BODY_SIZE": 1024 * 1024,
    # Request headers kept on the receipt besides the verifier's own.
    "HEADERS": ("Content-Type", "User-Agent"),
    # Verifier-specific options (the generic HMAC verifier's header names).
    "OPTIONS": {},
}

webhooks_settings = AppSettings(
    "WEBHOOKS",
    defaults={
        # {name: {...}} with the keys of SOURCE_DEFAULTS; name is the URL part.
        "SOURCES": {},
        # ``(receipt_id) -> None`` run on commit of a new or redelivered receipt.
        "ENQUEUE": "webhooks.tasks.enqueue",
        # Celery retries of a failing receipt, and the backoff cap in seconds.
        "MAX_RETRIES": 5,
        "RETRY_BACKOFF_MAX": 600,
        # How long processed or skipped receipts (and rejection counts) are
        # kept: longer than any provider's manual replay window.
        "RETENTION": timedelta(days=30),
    },
    import_strings=("ENQUEUE",),
)
