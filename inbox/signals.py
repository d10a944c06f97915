"""What the inbox decided, as signals: ``subscriber`` and ``message_id`` with
each."""

from django.dispatch import Signal

# A message was applied for the first time (sent when it commits).
message_received = Signal()
# A redelivery of an applied message was dropped.
duplicate_dropped = Signal()
