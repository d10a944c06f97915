"""A second handler for the load bench: one row each time handlers run."""

from django.db import connection

from webhooks.handlers import on

# No unique constraint on purpose: a receipt processed twice leaves two rows.
EFFECTS_TABLE = "bench_load_webhook_effect"


@on("stripe", "payment_intent.succeeded")
def count_effect(event):
    # Runs in processing's transaction, like the shop's handler next to it.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {EFFECTS_TABLE} (delivery_id) VALUES (%s)",
            [event.delivery_id],
        )
