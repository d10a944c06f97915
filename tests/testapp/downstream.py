"""A downstream provider double that dedupes on the caller's key, like Stripe."""

import itertools
import threading


class FakeProvider:
    def __init__(self):
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.charges = {}
        self.calls = 0

    def charge(self, key: str, amount: int) -> str:
        with self._lock:
            self.calls += 1
            if key not in self.charges:
                self.charges[key] = (f"ch_{next(self._ids)}", amount)
            return self.charges[key][0]

    def reset(self):
        with self._lock:
            self.charges.clear()
            self.calls = 0


provider = FakeProvider()
