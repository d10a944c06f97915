"""A TCP proxy in front of a real broker, so a test can cut the connection."""

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class CuttableProxy:
    """Forward a loopback port to a real broker until ``cut()`` drops every
    connection; while cut, a new connection is closed as soon as it opens.

    The broker itself keeps running (other tests share it) and keeps its
    queues: only the path to it fails, as when a network link goes down.
    """

    def __init__(self, broker_url: str):
        target = urlsplit(broker_url)
        self.target = (target.hostname, target.port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        netloc = target.netloc.replace(f":{target.port}", f":{port}")
        self.url = urlunsplit(target._replace(netloc=netloc))
        self.up = True
        self.sockets = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @contextlib.contextmanager
    def cut(self):
        """Drop every open connection, and refuse new ones until the block ends."""
        with self.lock:
            self.up = False
            for sock in self.sockets:
                with contextlib.suppress(OSError):  # closed by its peer already
                    sock.shutdown(socket.SHUT_RDWR)
        try:
            yield
        finally:
            self.up = True

    def close(self):
        self.listener.close()
        with self.cut():
            pass

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self.lock:
                if not self.up:
                    client.close()
                    continue
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
                self.sockets |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), daemon=True
                ).start()

    def _pump(self, source, sink):
        with contextlib.suppress(OSError):  # either side went away
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self.lock:
            self.sockets -= {source, sink}
        source.close()


@contextlib.contextmanager
def cuttable(broker_url: str):
    """A ``CuttableProxy`` to ``broker_url``, closed at the end of the block."""
    proxy = CuttableProxy(broker_url)
    try:
        yield proxy
    finally:
        proxy.close()
