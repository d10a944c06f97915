"""No index led by source: the planner took one for a delivery's lookup
whenever its statistics had not seen the source yet, and walked every receipt
of that source. The console's lists and counts keep an index each.

The new indexes are built before the old ones go. On a large table each
build blocks writes to the receipts while it runs: migrate in a quiet hour.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0006_receipt_steps_lease"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="webhookreceipt",
            index=models.Index(
                fields=["received_at", "source"], name="webhooks_received_src_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="webhookreceipt",
            index=models.Index(
                fields=["state", "source"], name="webhooks_state_source_idx"
            ),
        ),
        migrations.RemoveIndex(
            model_name="webhookreceipt",
            name="webhooks_received_idx",
        ),
        migrations.RemoveIndex(
            model_name="webhookreceipt",
            name="webhooks_source_received_idx",
        ),
        migrations.RemoveIndex(
            model_name="webhookreceipt",
            name="webhooks_source_state_idx",
        ),
    ]
