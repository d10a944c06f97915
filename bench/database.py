"""Create the benchmark database on first use and migrate it."""

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connections


def server(alias="default"):
    """A connection to the PostgreSQL server of ``alias``, on its maintenance
    database: it exists before any benchmark database does."""
    config = settings.DATABASES[alias]
    return psycopg.connect(
        host=config.get("HOST") or "127.0.0.1",
        port=config.get("PORT") or 5432,
        user=config.get("USER") or "postgres",
        dbname="postgres",
        autocommit=True,
    )


def prepare(alias="default"):
    config = settings.DATABASES[alias]
    if config["ENGINE"].endswith("postgresql"):
        with server(alias) as connection:
            exists = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [config["NAME"]]
            ).fetchone()
            if not exists:
                connection.execute(f'CREATE DATABASE "{config["NAME"]}"')
    call_command("migrate", interactive=False, verbosity=0, database=alias)


def empty(*models, alias="default"):
    """Start a part on empty tables: the rows and dead tuples an earlier part
    left behind (a purge's, a fill's) would slow its reads and move its
    figures from one run to the next. CASCADE: rows that point at them go too."""
    connection = connections[alias]
    names = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {names} CASCADE")
