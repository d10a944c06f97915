"""Delete expired keys, published outbox rows, old inbox rows and receipts."""

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from idempotency.shared import retention


class Command(BaseCommand):
    help = (
        "Delete records past their retention, in small batches: expired "
        "idempotency keys, published outbox messages, old inbox rows and "
        "processed webhook receipts."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Count what would be deleted; delete nothing.",
        )
        parser.add_argument(
            "--only",
            help="Comma-separated kinds, e.g. idempotency,outbox.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=retention.DEFAULT_BATCH_SIZE,
            help="Rows per transaction (default %(default)s).",
        )
        parser.add_argument(
            "--pause",
            type=float,
            default=retention.DEFAULT_PAUSE,
            metavar="SECONDS",
            help="Rest after each full batch, so writers on a busy database "
            "get it back between batches (default %(default)s; 0: flat out).",
        )
        parser.add_argument(
            "--database",
            help="The database to purge, for rows written there with using= "
            "(default: each model's, where the router sends its writes).",
        )

    def handle(
        self, *args, dry_run, only, batch_size, pause, database, verbosity, **options
    ):
        # Each batch commits on its own: what was deleted before a failure or
        # a Ctrl-C stays deleted, and is said.
        deleted = {}

        def progress(kind, so_far):
            deleted[kind] = so_far
            if verbosity > 1:
                self.stdout.write(f"  {kind}: {so_far} so far")

        try:
            counts = retention.purge(
                only=only,
                batch_size=batch_size,
                pause=pause,
                dry_run=dry_run,
                progress=progress,
                using=database,
            )
        except (ValueError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from exc
        except (DatabaseError, KeyboardInterrupt) as exc:
            self._report(deleted, "deleted")
            if isinstance(exc, KeyboardInterrupt):
                why, then = "was interrupted", "run it again to delete the rest"
            else:
                why = f"stopped: {retention.reason(exc)}"
                then = "run it again once that is fixed (a missing table: migrate)"
            # A dry run deletes nothing: it has no batch to roll back.
            if not dry_run:
                then = f"the batch in progress was rolled back; {then}"
            raise CommandError(
                f"The purge {why}.\n{then[0].upper()}{then[1:]}."
            ) from exc
        self._report(counts, "would delete" if dry_run else "deleted")

    def _report(self, counts, verb):
        for kind, count in counts.items():
            self.stdout.write(f"{kind}: {verb} {count}")
