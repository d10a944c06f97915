"""A drain takes each source's oldest received receipt in turn: the index of
the dashboard's counts per state and source gains received_at, which serves
both. Led by state, never by source (see 0007).

The index keeps its name, so the old one goes first. On a large table the
build blocks writes to the receipts while it runs: migrate in a quiet hour.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0008_receipt_worker_deaths"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="webhookreceipt",
            name="webhooks_state_source_idx",
        ),
        migrations.AddIndex(
            model_name="webhookreceipt",
            index=models.Index(
                fields=["state", "source", "received_at"],
                name="webhooks_state_source_idx",
            ),
        ),
    ]
