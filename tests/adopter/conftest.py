"""The wheel and the virtualenv it is installed in: built once per session and
shared by every adopter test (they are the slow part)."""

import tempfile
from pathlib import Path

import pytest

from .project import (
    build_distributions,
    create_virtualenv,
    documented_extras,
    index_unreachable,
    remove,
)


@pytest.fixture(scope="session")
def adopter_workdir():
    """A temporary folder for the session's builds and projects, removed after."""
    path = Path(tempfile.mkdtemp(prefix="django-once-adopter-"))
    yield path
    remove(path)


def _skip_without_index(workdir):
    # Building needs setuptools and installing needs Django & co. from a
    # package index. A machine without one cannot run these tests (CI can).
    reason = index_unreachable(workdir / "probe")
    if reason:
        pytest.skip(f"no package index reachable, so no wheel to test: {reason}")


@pytest.fixture(scope="session")
def distributions(adopter_workdir):
    """The sdist and the wheel, built as a release would build them."""
    try:
        return build_distributions(adopter_workdir / "dist")
    except AssertionError:
        _skip_without_index(adopter_workdir)
        raise


@pytest.fixture(scope="session")
def venv(adopter_workdir, distributions):
    """A fresh virtualenv with the wheel and the README's extras, nothing else."""
    _sdist, wheel = distributions
    try:
        return create_virtualenv(
            adopter_workdir / "venv", f"{wheel}[{documented_extras()}]"
        )
    except AssertionError:
        _skip_without_index(adopter_workdir)
        raise
