"""Fake downstream services over real HTTP, counting every effect they make.

One threaded ``http.server`` on loopback plays three outside services:

- a payment **provider** (``POST /provider/charges``, ``/provider/refunds``)
  that honours ``Idempotency-Key`` as Stripe does: the same key makes one
  effect and returns it again;
- a **carrier** (``POST /carrier/shipments``) that does the same;
- a **mailer** (``POST /mailer/mails``) that takes no key at all: every call
  sends one more mail, as an SMTP relay would.

The test process starts it (``fake_services()``) and reads the counts; the
processes under test reach it through ``FAKES_URL`` in their environment
(``tests.testapp.payments`` is their client).
"""

import itertools
import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

URL_VARIABLE = "FAKES_URL"
KEYED = {
    "/provider/charges": "charge",
    "/provider/refunds": "refund",
    "/carrier/shipments": "shipment",
}
MAILS = "/mailer/mails"


class Effects:
    """What the fakes did: the effects each key made and every call seen."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # kind -> key -> the one effect that key made ({"id": ..., **body})
        self.made: dict[str, dict[str, dict]] = {kind: {} for kind in KEYED.values()}
        # kind -> how many calls (with any key) asked for it
        self.calls: Counter[str] = Counter()
        self.mails: list[dict] = []

    def keyed(self, kind: str, key: str, body: dict) -> tuple[dict, bool]:
        """The effect of ``key``: made now (True) or made before (False)."""
        with self._lock:
            self.calls[kind] += 1
            if key in self.made[kind]:
                return self.made[kind][key], False
            effect = {"id": f"{kind}_{next(self._ids)}", **body}
            self.made[kind][key] = effect
            return effect, True

    def mail(self, body: dict) -> dict:
        with self._lock:
            self.calls["mail"] += 1
            sent = {"id": f"mail_{next(self._ids)}", **body}
            self.mails.append(sent)
            return sent

    def count(self, kind: str) -> int:
        """How many distinct effects of ``kind`` exist ("mail": mails sent)."""
        with self._lock:
            return len(self.mails) if kind == "mail" else len(self.made[kind])

    def counts(self) -> dict[str, int]:
        return {kind: self.count(kind) for kind in (*KEYED.values(), "mail")}


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._answer(400, {"error": "the body is not JSON"})
        effects = self.server.effects
        if self.path == MAILS:
            return self._answer(201, effects.mail(body))
        kind = KEYED.get(self.path)
        if kind is None:
            return self._answer(404, {"error": f"no route {self.path}"})
        key = self.headers.get("Idempotency-Key")
        if not key:
            return self._answer(400, {"error": "Idempotency-Key is required"})
        effect, made = effects.keyed(kind, key, body)
        return self._answer(201 if made else 200, effect)

    def _answer(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        pass  # quiet: the counts tell the story


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, effects: Effects):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.effects = effects


class FakeServices:
    """The running fakes: ``url`` to reach them, ``effects`` to count."""

    def __init__(self, server: _Server):
        self._server = server
        self.effects = server.effects
        host, port = server.server_address[:2]
        self.url = f"http://{host}:{port}"

    def env(self) -> dict[str, str]:
        """What a child process needs in its environment to reach them."""
        return {URL_VARIABLE: self.url}


@contextmanager
def fake_services() -> Iterator[FakeServices]:
    server = _Server(Effects())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeServices(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
