"""The units' state index without the lease: every step renews its unit's
lease, and an index holding lease_expires_at made each renewal a new version
of the row in all four of the table's indexes, where an index on the state
alone lets PostgreSQL update the row in place (a HOT update). Stuck units
are then found among the running and compensating ones, as many as the
units in flight.

The new index is built before the old one goes. On a large table the build
blocks writes to the units (new units and steps) while it runs, about 0.4 s
a million rows here: migrate in a quiet hour.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency", "0004_created_operation_index"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="unitrecord",
            index=models.Index(fields=["state"], name="once_unit_state_only_idx"),
        ),
        migrations.RemoveIndex(
            model_name="unitrecord",
            name="once_unit_state_idx",
        ),
    ]
