"""The header names on the wire between the outbox and the inbox.

The outbox writes them and the inbox (or any consumer) reads them, and the
two apps never import each other: the wire format is the contract, named once
here.
"""

import re

# The header every delivery carries its message id in; consumers dedupe on it.
MESSAGE_ID_HEADER = "once-message-id"
# The one header the event's own headers (``record(headers=...)``) travel in,
# as a table. The names beside it belong to the transport: Celery reads
# ``task``, ``expires``, ``eta``...; RabbitMQ routes on ``CC``/``BCC`` and a
# headers exchange on any of them. Debezium's router sends the headers column
# under the same name.
EVENT_HEADERS = "once-headers"
# The intent an event serves (``idempotency.shared.units``): a SHA-256 digest,
# never a raw client key. record() inside a unit writes it; the inbox hands it
# to the consumer's unit, which passes it on.
INTENT_HEADER = "once-intent"
# What an intent looks like (a SHA-256 digest in hex): the inbox trusts only
# such a value, and the outbox promotes only such a one beside the
# transport's headers, where anything else could steer the transport.
INTENT_PATTERN = re.compile(r"[0-9a-f]{64}")
