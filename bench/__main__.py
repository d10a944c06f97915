"""Run every benchmark in one process and write docs/benchmarks.md."""

import importlib
import os
import sys
import time
from pathlib import Path

# Each module exposes run() -> str: a Markdown section with its figures.
MODULES = [
    "bench.idempotency",
    "bench.relay",
    "bench.inbox",
    "bench.webhooks",
    "bench.retention",
    "bench.growth",
    "bench.dashboard",
    "bench.load",
]

HEADER = """# Benchmarks

Written by `make bench`; every ratio compares figures measured side by side in
the same run. Re-run it to refresh this file. Machine: {machine}.
"""


def machine() -> str:
    import platform

    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0].split()[0]
    return (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"Django {django.get_version()}, PostgreSQL {postgres}, "
        f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def main(argv):
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    chosen = argv or MODULES
    sections = []
    for name in chosen:
        module = importlib.import_module(name if "." in name else f"bench.{name}")
        section = module.run()
        print(section, flush=True)
        sections.append(section)
    if not argv:
        header = HEADER.format(machine=machine())
        Path("docs/benchmarks.md").write_text(header + "\n" + "\n".join(sections))
        print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main(sys.argv[1:])
