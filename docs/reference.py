"""Write docs/settings.md from the apps' option tables: ``make docs``.

Each key's meaning is its ``Option(doc=...)``, so the code stays the one
place a setting is described. tests/test_docs.py fails when docs/settings.md
is not what this script writes, or when an option has no ``doc``.
"""

import importlib
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_MD = ROOT / "docs" / "settings.md"

HEADER = """\
# Settings

Generated from the apps' option tables by `make docs`; edit the options'
`doc` in the `conf.py` modules, not this file.

Each app reads one dict from your settings. Unknown keys are an error, every
value is validated by `manage.py check` (the check id in the last column
reports a bad one), and the running server refuses the same bad values the
first time it reads them: a setting that would switch a guarantee off never
runs. Durations take seconds or a `timedelta`.
"""

# (title, module, attribute, introduction) of each table.
TABLES = [
    ("IDEMPOTENCY", "idempotency.conf", "idempotency_settings", ""),
    ("OUTBOX", "outbox.conf", "outbox_settings", ""),
    ("INBOX", "inbox.conf", "inbox_settings", ""),
    ("WEBHOOKS", "webhooks.conf", "webhooks_settings", ""),
    (
        'WEBHOOKS["SOURCES"][name]',
        "webhooks.conf",
        "SOURCE_OPTIONS",
        "Each source is validated on its own: a bad one refuses its own "
        "deliveries, not every source's.",
    ),
]


def show_default(value) -> str:
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, str | list):
        # JSON-like quotes, as a settings.py would spell it.
        return f"`{value!r}`".replace("'", '"')
    return f"`{value!r}`"


def _duration(value: timedelta) -> str:
    if value < timedelta(seconds=1):
        return f"{value.total_seconds() * 1000:g} ms"
    seconds = int(value.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0 and seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count > 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def tables():
    """``(title, introduction, options)`` of each table, in page order."""
    for title, module_name, attribute, introduction in TABLES:
        found = getattr(importlib.import_module(module_name), attribute)
        yield title, introduction, getattr(found, "options", found)  # or a dict


def undocumented(options) -> list[str]:
    """The keys of ``options`` whose ``doc`` says nothing."""
    return [key for key, option in options.items() if not option.doc.strip()]


def table(options) -> str:
    rows = ["| key | default | meaning | check |", "|---|---|---|---|"]
    for key, option in options.items():
        meaning = option.doc.replace("|", "\\|")
        default = show_default(option.default).replace("|", "\\|")
        rows.append(f"| `{key}` | {default} | {meaning} | `{option.check_id}` |")
    return "\n".join(rows)


def render() -> str:
    parts = [HEADER]
    for title, introduction, options in tables():
        if missing := undocumented(options):
            raise ValueError(f"{title}: no doc for {missing}")
        parts.append(f"## `{title}`\n")
        if introduction:
            parts.append(f"{introduction}\n")
        parts.append(table(options) + "\n")
    return "\n".join(parts)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    SETTINGS_MD.write_text(render())
    print(f"wrote {SETTINGS_MD.relative_to(ROOT)}")
