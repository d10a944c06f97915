"""What the outbox decided, as signals. Each is sent after the commit of the
fact it reports, with ``aggregate_type``, ``event_type`` and ``message_id``
(per event) or ``count`` (per batch)."""

from django.dispatch import Signal

# record() wrote an event (sent when its transaction commits).
event_recorded = Signal()
# The relay published a batch: count, broker lag (seconds, oldest first).
events_published = Signal()
# A publish attempt failed and the event stays pending: error, attempts.
publish_failed = Signal()
# An event ran out of attempts and is dead: error, attempts.
event_dead = Signal()
# An operator requeued dead events: count, user.
events_requeued = Signal()
