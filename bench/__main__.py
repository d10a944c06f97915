"""Run every benchmark in one process and write docs/benchmarks.md."""

import importlib
import os
import sys
from pathlib import Path

# Each module exposes run() -> str: a Markdown section with its figures.
MODULES = [
    "bench.idempotency",
    "bench.outbox",
    "bench.webhooks",
    "bench.retention",
    "bench.dashboard",
    "bench.load",
]

HEADER = """# Benchmarks

Written by `make bench` on this machine; every ratio compares figures measured
side by side in the same run. Re-run it to refresh this file.
"""


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
        Path("docs/benchmarks.md").write_text(HEADER + "\n" + "\n".join(sections))
        print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main(sys.argv[1:])
