"""What the keys feature decided, as signals (sent after the commit when the
decision is a committed fact). Every one is sent with ``operation``, ``mode``
and ``scope`` keyword arguments, never the raw key: use ``unit`` (the
identity digest) to tell requests apart."""

from django.dispatch import Signal

# A first request took its key (and, in atomic mode, its work committed).
key_claimed = Signal()
# A stored answer was sent again: status.
key_replayed = Signal()
# The key was in flight elsewhere and the request got 409.
key_conflict = Signal()
# The key came back with a different request: 422.
key_mismatch = Signal()
# The view's work failed or was not kept: status, reason.
key_failed = Signal()
