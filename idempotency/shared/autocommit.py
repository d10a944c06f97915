"""Every app commits its own transactions: a claim, a recovery point, an
inbox row, a webhook receipt, a relay's lease. With Django's autocommit off
(``DATABASES[alias]["AUTOCOMMIT"] = False``) the outermost ``atomic()``
commits nothing and leaves the commit to the caller, so each of them would be
answered for (201, 202, a consumer's ack) and then rolled back when the
connection closes. Such a database is refused where it is used, and by check
``idempotency.E017``."""

from django.db import connections


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


def refuse_manual_commit(using: str, error: type[Exception]) -> None:
    """Raise ``error`` when ``using`` has autocommit off: before any SQL."""
    if why := manual_commit(using):
        raise error(why)
