"""One index for the console's time series and operation filter, led by
created_at: the (operation, created_at) index it replaces was the planner's
pick for a key's read whenever its statistics had not seen the key's
operation yet, and that read then walked all of the operation's rows.

The new index is built before the two old ones go. On a large table the
build blocks writes to the records while it runs: migrate in a quiet hour.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency", "0003_units_and_steps"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="idempotencyrecord",
            index=models.Index(
                fields=["created_at", "operation"], name="idempotency_created_op_idx"
            ),
        ),
        migrations.RemoveIndex(
            model_name="idempotencyrecord",
            name="idempotency_created_idx",
        ),
        migrations.RemoveIndex(
            model_name="idempotencyrecord",
            name="idempotency_operation_idx",
        ),
    ]
