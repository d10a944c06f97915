"""The databases the four apps keep their rows in: PostgreSQL or SQLite, with
Django's autocommit on.

Every app commits its own transactions: a claim, a recovery point, an inbox
row, a webhook receipt, a relay's lease. With Django's autocommit off
(``DATABASES[alias]["AUTOCOMMIT"] = False``) the outermost ``atomic()``
commits nothing and leaves the commit to the caller, so each of them would be
answered for (201, 202, a consumer's ack) and then rolled back when the
connection closes. Their statements are written for PostgreSQL and SQLite
(``ON CONFLICT``, ``SKIP LOCKED``, a local ``lock_timeout``): on another
engine what they guarantee is unknown. Such a database is refused where it
is used, and by checks ``idempotency.E017`` and ``idempotency.E018``."""

from django.db import connections

ENGINES = ("postgresql", "sqlite")


def unsupported_engine(using: str) -> str | None:
    """Why the engine of the database ``using`` cannot hold the apps' rows,
    or None."""
    vendor = connections[using].vendor
    if vendor in ENGINES:
        return None
    return (
        f"DATABASES[{using!r}] uses the {vendor} engine: django-once's claims, "
        "outbox, inbox and receipts are built for PostgreSQL (and SQLite for "
        "development), and what they guarantee elsewhere is unknown. Keep "
        "their tables on PostgreSQL (a router can send them there)."
    )


def manual_commit(using: str) -> str | None:
    """Why the database ``using`` cannot hold the apps' rows, or None."""
    if connections[using].settings_dict.get("AUTOCOMMIT", True):
        return None
    return (
        f"DATABASES[{using!r}]['AUTOCOMMIT'] is False: Django then commits no "
        "transaction.atomic() block, so django-once's claims, recovery points, "
        "inbox rows and webhook receipts would be answered for and rolled back "
        "when the connection closes. Keep autocommit on for this database."
    )


def refuse_unusable(using: str, error: type[Exception]) -> None:
    """Raise ``error`` when ``using`` cannot hold the apps' rows: before any
    SQL."""
    if why := unsupported_engine(using) or manual_commit(using):
        raise error(why)
