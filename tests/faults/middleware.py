"""Fault injection for the server processes the fault tests start (tests only)."""

import os
import signal

FAULT_HEADER = "X-Test-Fault"


class DieAfterCommitMiddleware:
    """SIGKILL this worker once the view's transaction has committed, before
    a byte of the response is written: the client sees the connection drop."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.headers.get(FAULT_HEADER) == "die-after-commit":
            os.kill(os.getpid(), signal.SIGKILL)
        return response
