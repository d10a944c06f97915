"""A consumer that raises, for the worker tests (see ``tests.inbox.worker``)."""

import os

from inbox.api import consumer_task
from tests.testapp.models import Widget


@consumer_task("inbox-tests.flaky", name="inbox_tests.flaky")
def flaky(*, payload, headers):
    """Raise for the first ``payload["failures"]`` runs, or while the file
    ``payload["fail_while"]`` exists; then make one widget."""
    runs = payload["runs"]
    with open(runs, "a") as log:  # one line per run, committed or not
        log.write("run\n")
    with open(runs) as log:
        run = len(log.readlines())
    if run <= payload.get("failures", 0) or os.path.exists(
        payload.get("fail_while", "")
    ):
        raise RuntimeError(f"flaky run {run}")
    Widget.objects.create(name=headers["once-message-id"])
