"""Concurrent clients for the throughput figures."""

import http.client
import threading
import time


def seconds_for(shares, send) -> float:
    """Seconds for one thread per share to ``send(item)`` each of its items.

    The threads start together behind a barrier, so thread start-up is not
    timed.
    """
    barrier = threading.Barrier(len(shares) + 1)

    def client(share):
        barrier.wait()
        for item in share:
            send(item)

    threads = [threading.Thread(target=client, args=(s,)) for s in shares]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def timed_post(port, path, body, headers, *, expect) -> int:
    """Nanoseconds for one POST on a new connection (gunicorn's sync workers
    close each); raise unless it answered ``expect``."""
    started = time.perf_counter_ns()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("POST", path, body, headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    elapsed = time.perf_counter_ns() - started
    if response.status != expect:
        raise RuntimeError(f"{path} answered {response.status}")
    return elapsed
