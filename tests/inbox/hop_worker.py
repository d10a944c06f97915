"""The Celery app of the intent test's worker: the suite's, plus the consumers
of ``tests.inbox.hop_consumers`` (imported at worker start)."""

from tests.celery import app

__all__ = ["app"]

app.conf.imports = [*app.conf.imports, "tests.inbox.hop_consumers"]
