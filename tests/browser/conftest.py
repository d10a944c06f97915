import pytest

from tests.celery import app as celery_app
from webhooks import handlers


@pytest.fixture
def handler_runs():
    """Record each run of a 'github ping' handler; tasks run in the server."""
    runs = []
    saved = {key: list(value) for key, value in handlers._registry.items()}
    handlers.on("github", "ping")(lambda event: runs.append(event.delivery_id))
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield runs
    celery_app.conf.task_always_eager = eager
    handlers._registry.clear()
    handlers._registry.update(saved)
