"""Create the benchmark database on first use and migrate it."""

import psycopg
from django.conf import settings
from django.core.management import call_command


def prepare(alias="default"):
    config = settings.DATABASES[alias]
    if config["ENGINE"].endswith("postgresql"):
        params = {
            "host": config.get("HOST") or "127.0.0.1",
            "port": config.get("PORT") or 5432,
            "user": config.get("USER") or "postgres",
            "dbname": "postgres",
            "autocommit": True,
        }
        with psycopg.connect(**params) as connection:
            exists = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [config["NAME"]]
            ).fetchone()
            if not exists:
                connection.execute(f'CREATE DATABASE "{config["NAME"]}"')
    call_command("migrate", interactive=False, verbosity=0, database=alias)
