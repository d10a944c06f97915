"""Print the Debezium connector config for the outbox table."""

import json
import re
from argparse import ArgumentTypeError

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections, router

from ...conf import DEBEZIUM, outbox_settings
from ...debezium import connector_config
from ...models import OutboxMessage

# Kafka's topic names (its Topic.LEGAL_CHARS and length): Debezium refuses a
# topic.prefix of any other character.
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def connector_name(value: str) -> str:
    if not value.strip():
        raise ArgumentTypeError("Kafka Connect needs a connector name.")
    return value


def topic_prefix(value: str) -> str:
    if not TOPIC.fullmatch(value):
        raise ArgumentTypeError(
            f"{value!r} is no Kafka topic name: 1 to 249 letters, digits, "
            "'.', '_' or '-'."
        )
    return value


class Command(BaseCommand):
    help = "Print the Debezium connector + outbox event router config as JSON."

    def add_arguments(self, parser):
        parser.add_argument("--name", default="once-outbox", type=connector_name)
        parser.add_argument("--topic-prefix", default="once", type=topic_prefix)
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
        try:
            relay = outbox_settings.RELAY
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
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
        if relay != DEBEZIUM:
            # Beside the Celery relay the connector publishes every event a
            # second time (outbox.E006 refuses the converse).
            self.stderr.write(
                self.style.WARNING(
                    f"OUTBOX['RELAY'] is {relay!r}: set it to 'debezium' before "
                    "this connector starts, or the Celery relay publishes every "
                    "event too."
                )
            )
