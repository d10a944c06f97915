"""Delete expired keys, published outbox rows, old inbox rows and receipts."""

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

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
            type=lambda v: [k for k in v.split(",") if k],
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

    def handle(self, *args, dry_run, only, batch_size, pause, verbosity, **options):
        progress = self._progress if verbosity > 1 else None
        try:
            counts = retention.purge(
                only=only,
                batch_size=batch_size,
                pause=pause,
                dry_run=dry_run,
                progress=progress,
            )
        except (ValueError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from exc
        verb = "would delete" if dry_run else "deleted"
        for kind, count in counts.items():
            self.stdout.write(f"{kind}: {verb} {count}")

    def _progress(self, kind, deleted):
        self.stdout.write(f"  {kind}: {deleted} so far")
