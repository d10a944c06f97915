"""Settings of the gunicorn server the intake tests start: the test database,
a GitHub source with a small body limit, and no processing."""

from tests.faults.settings import *  # noqa: F403
from tests.webhooks.signing import GITHUB_SECRET

WEBHOOKS = {
    "SOURCES": {
        "github": {
            "VERIFIER": "github",
            "SECRETS": [GITHUB_SECRET],
            "MAX_BODY_SIZE": 4096,
        }
    },
    "ENQUEUE": "tests.webhooks.server_settings.enqueue_nothing",
}


def enqueue_nothing(receipt_id):
    """The tests look at the stored receipt; processing is tested elsewhere."""
