"""What the webhook intake and its processing decided, as signals: ``source``
with each, and ``delivery_id``/``event_type`` once a delivery is verified."""

from django.dispatch import Signal

# A verified delivery was stored for processing.
delivery_accepted = Signal()
# A delivery was refused: reason (the problem type's short name), status.
delivery_rejected = Signal()
# A resent delivery was answered from its receipt.
delivery_duplicate = Signal()
# A receipt's handlers ran and committed.
delivery_processed = Signal()
# A receipt's handlers raised: error, attempts.
delivery_failed = Signal()
# An operator replayed receipts from the console: count, user.
delivery_replayed = Signal()
