"""Print the Debezium connector config for the outbox table."""

import json

from django.core.management.base import BaseCommand

from ...debezium import connector_config


class Command(BaseCommand):
    help = "Print the Debezium connector + outbox event router config as JSON."

    def add_arguments(self, parser):
        parser.add_argument("--name", default="once-outbox")
        parser.add_argument("--topic-prefix", default="once")
        parser.add_argument("--database", default=None)

    def handle(self, *args, **options):
        config = connector_config(
            name=options["name"],
            topic_prefix=options["topic_prefix"],
            using=options["database"],
        )
        self.stdout.write(json.dumps(config, indent=2))
