"""What a Celery worker knows at start, for checks that run elsewhere."""

import weakref

from celery import Celery

# The Celery apps whose task modules this process has imported.
_imported: "weakref.WeakSet[Celery]" = weakref.WeakSet()


def import_task_modules(app: Celery) -> None:
    """Import the task modules as a worker does at start (the app's
    ``autodiscover_tasks`` packages, then ``imports``), once per process.

    A worker has them all; ``manage.py check`` or a web process may have none
    yet. Marked first: the import runs Django's system checks (Celery's
    Django fix-up), which ask again and must not import again.
    """
    if app.loader.worker_initialized or app in _imported:
        return
    _imported.add(app)
    app.loader.import_default_modules()
