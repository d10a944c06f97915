"""Run the benchmarks and write their sections of docs/benchmarks.md.

``python -m bench`` runs every part; ``python -m bench idempotency relay``
runs those parts only and rewrites their sections, keeping the others from
earlier runs (``make bench PARTS="idempotency relay"``).
"""

import argparse
import importlib
import os
import re
import time
from pathlib import Path

# Each part's module exposes run() -> str: a Markdown section with its figures.
PARTS = [
    "idempotency",
    "relay",
    "inbox",
    "webhooks",
    "steps",
    "observability",
    "retention",
    "growth",
    "dashboard",
    "load",
]
PAGE = Path("docs/benchmarks.md")
# Each section follows its marker, so one part's run can replace it alone.
MARKER = "<!-- bench.{} -->"
MARKERS = re.compile(r"^<!-- bench\.(\w+) -->$", re.MULTILINE)

HEADER = """# Benchmarks

Written by `make bench`; every ratio compares figures measured side by side in
the same run, and each section ends with when its part ran and how long it
took. Re-run it to refresh this file (`python -m bench --help`: one part at
a time). Machine: {machine}.
"""


def machine() -> str:
    import platform

    import django

    from bench import database

    # The server's maintenance database: a part run alone (relay, say) may
    # never have created the default one.
    with database.server() as connection:
        postgres = connection.execute("SHOW server_version").fetchone()[0].split()[0]
    return (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"Django {django.get_version()}, PostgreSQL {postgres}"
    )


def sections_of(page: str) -> dict[str, str]:
    """The page's sections by part, in page order."""
    pieces = MARKERS.split(page)
    return {pieces[n]: pieces[n + 1].strip() + "\n" for n in range(1, len(pieces), 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "parts",
        nargs="*",
        metavar="part",
        help=f"parts to run, of: {', '.join(PARTS)} (default: all)",
    )
    chosen = parser.parse_args(argv).parts or PARTS
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        parser.error(f"no part {', '.join(unknown)}; choose of {', '.join(PARTS)}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    sections = sections_of(PAGE.read_text()) if PAGE.exists() else {}
    started = time.monotonic()
    for part in chosen:
        began = time.monotonic()
        section = importlib.import_module(f"bench.{part}").run().strip()
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        seconds = time.monotonic() - began
        sections[part] = f"{section}\n\n*(bench.{part}: {when}, {seconds:.0f} s)*\n"
        print(sections[part], flush=True)
        # After each part: a later part that fails keeps the earlier figures.
        _write(sections)
    print(f"wrote {PAGE}: {', '.join(chosen)} in {time.monotonic() - started:.0f} s")


def _write(sections: dict[str, str]) -> None:
    header = HEADER.format(machine=machine())
    body = "\n".join(
        f"{MARKER.format(part)}\n{sections[part]}" for part in PARTS if part in sections
    )
    PAGE.write_text(header + "\n" + body)


if __name__ == "__main__":
    main()
