"""Concurrent clients for the throughput figures."""

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
