"""A proof kit's failure as pytest shows it: the kit's message and the user's
frame, without the framework's traceback.

Every kit raises ``GuaranteeBroken`` or ``CannotCheck``; the shared plugin's
``pytest_runtest_makereport`` hands each failed report here, which shortens
the ones those raised, whatever kit they come from. ``pytest -v`` (or
``--full-trace``) keeps pytest's own report: the whole traceback and the
captured log, where Django logs the failures the kit injected.
"""

import sys
import sysconfig
from pathlib import Path

import pytest

# Where the kits and the apps they test live: their frames are not the user's.
_APPS = ("idempotency", "inbox", "outbox", "webhooks")
# Captured output that holds the framework's tracebacks (django.request logs
# every 500 the kit caused); the user's own prints stay.
_NOISY_SECTIONS = ("Captured log", "Captured stderr")
HINT = "(pytest -v shows the whole traceback and the captured log)"


def shorten(item: pytest.Item, report: pytest.TestReport, excinfo) -> None:
    """Make ``report`` the kit's message and the user's frame, when a kit's
    failure made it and the run is not verbose."""
    if not _is_kit_failure(excinfo) or _wants_everything(item.config):
        return
    frame = _user_frame(item, excinfo)
    if frame is None:
        return
    excinfo.traceback = type(excinfo.traceback)([frame])
    longrepr = excinfo.getrepr(style="short", tbfilter=False, chain=False)
    longrepr.addsection("the whole report", HINT)
    report.longrepr = longrepr
    report.sections = [
        (name, content)
        for name, content in report.sections
        if not name.startswith(_NOISY_SECTIONS)
    ]


def _is_kit_failure(excinfo) -> bool:
    # Loaded only once a kit raised one of its own: never imported here.
    guarantees = sys.modules.get("idempotency.shared.testing.guarantees")
    if excinfo is None or guarantees is None:
        return False
    return excinfo.errisinstance((guarantees.GuaranteeBroken, guarantees.CannotCheck))


def _wants_everything(config: pytest.Config) -> bool:
    return config.option.verbose > 0 or bool(config.getoption("fulltrace", False))


def _user_frame(item: pytest.Item, excinfo):
    """The last frame of the user's code (the call into the kit); for a
    suite's test, which lives in the kit, the test method's own frame."""
    own = getattr(getattr(item, "obj", None), "__code__", None)
    users = [entry for entry in excinfo.traceback if _is_users(entry.path)]
    if users:
        return users[-1]
    tests = [entry for entry in excinfo.traceback if entry.frame.code.raw is own]
    return tests[-1] if tests else None


def _is_users(path) -> bool:
    path = Path(path)
    return not any(path.is_relative_to(folder) for folder in _not_users())


def _not_users() -> list[Path]:
    """The apps' packages, the standard library and installed packages."""
    here = Path(__file__).resolve()
    root = here.parents[3]  # the folder holding the apps
    folders = [root / app for app in _APPS]
    paths = sysconfig.get_paths()
    folders += [
        Path(paths[name]).resolve() for name in ("stdlib", "purelib", "platlib")
    ]
    return folders
