"""Print the Debezium connector config for the outbox table."""

import json

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections, router

from ...debezium import connector_config
from ...models import OutboxMessage


class Command(BaseCommand):
    help = "Print the Debezium connector + outbox event router config as JSON."

    def add_arguments(self, parser):
        parser.add_argument("--name", default="once-outbox")
        parser.add_argument("--topic-prefix", default="once")
        # Choices, as Django's own commands give them: an unknown alias is a
        # usage error naming the configured ones, not a ConnectionDoesNotExist.
        parser.add_argument(
            "--database",
            default=None,
            choices=tuple(connections),
            help="The database alias the outbox table lives in (default: the "
            "router's choice for OutboxMessage).",
        )

    def handle(self, *args, **options):
        using = options["database"] or router.db_for_write(OutboxMessage)
        try:
            config = connector_config(
                name=options["name"], topic_prefix=options["topic_prefix"], using=using
            )
        except DatabaseError as exc:
            # It asks the database which schema holds the table.
            raise CommandError(
                f"Cannot read the outbox table's schema from database {using!r}: "
                f"{str(exc).strip()}\nCheck that it is reachable, or choose "
                "another with --database."
            ) from exc
        self.stdout.write(json.dumps(config, indent=2))
