import pytest


@pytest.fixture
def consumer_tasks():
    """Celery tasks the test declares, unregistered afterwards."""
    from tests.celery import app

    before = set(app.tasks)
    yield
    for name in set(app.tasks) - before:
        app.tasks.unregister(name)
