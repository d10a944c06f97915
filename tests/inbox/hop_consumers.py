"""Two hops after a keyed request, for the intent test
(``tests/inbox/test_intent_hops.py``): a consumer that books a shipment and
records ``shipment.booked``, and one that mails a receipt for it.

Each run appends what its unit was to the file ``HOPS_LOG`` names, one JSON
line per run, committed or not.
"""

import json
import os

from idempotency.shared import units
from inbox.api import consumer_task
from outbox.api import record


def _log(hop: str) -> int:
    """Log this run's unit; return how many runs of ``hop`` were logged."""
    unit = units.current()
    line = {
        "hop": hop,
        "parts": list(unit.parts),
        "intent": unit.intent,
        "inherited": unit.inherited_intent,
        "derived": unit.derive("ship"),
    }
    path = os.environ["HOPS_LOG"]
    with open(path, "a") as log:
        log.write(json.dumps(line) + "\n")
    with open(path) as log:
        return sum(json.loads(entry)["hop"] == hop for entry in log)


@consumer_task("intent-tests.shipping", name="intent_tests.book_shipment")
def book_shipment(*, event_type, aggregate_type, aggregate_id, payload, headers):
    if _log("shipping") == 1:
        # The first run fails after "calling the carrier": the retry is a
        # real redelivery of the same message.
        raise RuntimeError("the carrier timed out")
    record("shipment", aggregate_id, "shipment.booked", {"order": payload["order"]})


@consumer_task("intent-tests.mailer", name="intent_tests.send_receipt")
def send_receipt(*, event_type, aggregate_type, aggregate_id, payload, headers):
    _log("mailer")


@consumer_task("intent-tests.bare", name="intent_tests.bare")
def bare(*, payload):
    """A task another producer sent: the ids are in the task's headers only."""
    if _log("bare") == 1:
        raise RuntimeError("fails once: the retry must keep the headers")
