import pytest

from tests.celery import app as celery_app
from tests.webhooks import signing
from webhooks import handlers

SOURCES = {
    "github": {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]},
    "stripe": {
        "VERIFIER": "stripe",
        "SECRETS": [signing.STRIPE_SECRET, signing.STRIPE_OLD_SECRET],
    },
    "standard": {"VERIFIER": "standard", "SECRETS": [signing.STANDARD_SECRET]},
    "hmac": {"VERIFIER": "hmac", "SECRETS": [signing.HMAC_SECRET]},
    "small": {
        "VERIFIER": "hmac",
        "SECRETS": [signing.HMAC_SECRET],
        "MAX_BODY_SIZE": 64,
    },
}


@pytest.fixture(autouse=True)
def webhook_sources(settings):
    """The test sources, one per verifier; tests change them through this."""
    settings.WEBHOOKS = {"SOURCES": {k: dict(v) for k, v in SOURCES.items()}}
    return settings


@pytest.fixture(autouse=True)
def handler_registry():
    """Let tests register handlers without leaking them into other tests."""
    handlers.handlers_for("", "")  # discover the apps' handlers once, up front
    saved = {key: list(value) for key, value in handlers._registry.items()}
    steps_handlers = dict(handlers._steps_handlers)
    yield handlers
    handlers._registry.clear()
    handlers._registry.update(saved)
    handlers._steps_handlers.clear()
    handlers._steps_handlers.update(steps_handlers)


@pytest.fixture(autouse=True)
def eager_celery():
    """Run enqueued tasks in the calling thread, through Celery's task path."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield celery_app
    celery_app.conf.task_always_eager = previous
