"""Crash points of the test app's payment flow, for the fault tests.

``crash_point(name)`` does nothing unless the process was started with
``ONCE_TEST_CRASH_AT=name``: then the first process to reach that point
(``ONCE_TEST_CRASH_ONCE`` names a marker file only one can create) dies of
SIGKILL there, as a worker does when the kernel or an operator kills it. The
library knows nothing of this: the points live in the test app's own code,
around and inside its steps.
"""

import os
import signal

CRASH_AT = "ONCE_TEST_CRASH_AT"
CRASH_ONCE = "ONCE_TEST_CRASH_ONCE"


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_AT) != name:
        return
    try:
        # O_EXCL: of every process reaching the point, one creates it and dies;
        # the retry or redelivery runs through.
        os.close(os.open(os.environ[CRASH_ONCE], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)
