"""Write docs/settings.md from the apps' option tables: ``make docs``.

Each key's meaning is the comment above it in the table (a key right below
another one without a comment of its own shares that one's), so the code
stays the one place a setting is described. tests/test_docs.py fails when
docs/settings.md is not what this script writes.
"""

import importlib
import inspect
import re
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_MD = ROOT / "docs" / "settings.md"

HEADER = """\
# Settings

Generated from the apps' option tables by `make docs`; edit the comments in
the `conf.py` modules, not this file.

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

KEY_LINE = re.compile(r'^\s*"(?P<key>[A-Z_]+)": Option\(')
COMMENT_LINE = re.compile(r"^\s*# ?(?P<text>.*)$")


def meanings(source: str) -> dict[str, str]:
    """The comment above each ``"KEY": Option(`` line of ``source``."""
    found = {}
    comment: list[str] = []
    previous = None
    for line in source.splitlines():
        if match := COMMENT_LINE.match(line):
            comment.append(match["text"])
        elif match := KEY_LINE.match(line):
            key = match["key"]
            if comment:
                found[key] = " ".join(comment)
            elif previous is not None:
                found[key] = found[previous]  # one comment for a group of keys
            previous = key
            comment = []
        elif line.strip():
            comment = []
    return found


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


def table(module_name: str, attribute: str) -> str:
    module = sys.modules[module_name]
    options = getattr(module, attribute)
    options = getattr(options, "options", options)  # AppSettings or a dict
    described = meanings(inspect.getsource(module))
    described.update({k: o.doc for k, o in options.items() if o.doc})
    missing = sorted(set(options) - set(described))
    if missing:
        raise ValueError(f"{module_name}.{attribute}: no comment for {missing}")
    rows = ["| key | default | meaning | check |", "|---|---|---|---|"]
    for key, option in options.items():
        meaning = described[key].replace("|", "\\|")
        default = show_default(option.default).replace("|", "\\|")
        rows.append(f"| `{key}` | {default} | {meaning} | `{option.check_id}` |")
    return "\n".join(rows)


def render() -> str:
    parts = [HEADER]
    for title, module_name, attribute, introduction in TABLES:
        importlib.import_module(module_name)
        parts.append(f"## `{title}`\n")
        if introduction:
            parts.append(f"{introduction}\n")
        parts.append(table(module_name, attribute) + "\n")
    return "\n".join(parts)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    SETTINGS_MD.write_text(render())
    print(f"wrote {SETTINGS_MD.relative_to(ROOT)}")
