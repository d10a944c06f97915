"""What the sdist and the wheel hold: the apps with their migrations, templates
and type markers, the license, and none of the demo, tests or benchmarks."""

import tarfile
import zipfile
from email.parser import HeaderParser

import pytest
from packaging.requirements import Requirement

from .project import ROOT

pytestmark = pytest.mark.adopter

APPS = ("idempotency", "outbox", "inbox", "webhooks")


@pytest.fixture(scope="module")
def wheel_names(distributions):
    _sdist, wheel = distributions
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def source_files(pattern):
    """The apps' files matching ``pattern``, as paths inside the wheel."""
    return {
        path.relative_to(ROOT).as_posix()
        for app in APPS
        for path in (ROOT / app).glob(pattern)
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_wheel_holds_every_migration_template_and_type_marker(wheel_names):
    migrations = source_files("migrations/*.py")
    templates = source_files("templates/**/*")
    assert len(migrations) > len(APPS)  # at least one migration per app
    assert templates
    assert migrations <= wheel_names, sorted(migrations - wheel_names)
    assert templates <= wheel_names, sorted(templates - wheel_names)
    for app in APPS:
        assert f"{app}/py.typed" in wheel_names
    # The page the problem types' URIs lead to is served from the wheel.
    assert "idempotency/shared/problem_types.md" in wheel_names


def test_the_wheel_holds_every_module_of_the_apps(wheel_names):
    # A subpackage (outbox/publishers/, webhooks/verifiers/) that packaging
    # missed would import in this checkout and fail in an adopter's project.
    modules = source_files("**/*.py")
    assert "outbox/publishers/kombu.py" in modules
    assert modules <= wheel_names, sorted(modules - wheel_names)


def test_the_wheel_holds_the_license(wheel_names):
    licenses = [
        name for name in wheel_names if name.endswith(".dist-info/licenses/LICENSE")
    ]
    assert licenses, sorted(name for name in wheel_names if ".dist-info/" in name)


def test_the_wheel_holds_the_four_apps_and_nothing_else(wheel_names):
    # No tests/, project/ (the demo) or bench/: installing them would take
    # those top-level names in the adopter's environment too.
    top_level = {name.split("/")[0] for name in wheel_names}
    dist_info = {name for name in top_level if name.endswith(".dist-info")}
    assert len(dist_info) == 1
    assert top_level - dist_info == set(APPS)


def test_the_wheel_requires_only_django_drf_and_celery(distributions):
    _sdist, wheel = distributions
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith("/METADATA")]
        headers = HeaderParser().parsestr(archive.read(metadata).decode())
    required = [Requirement(line) for line in headers.get_all("Requires-Dist")]
    unconditional = {r.name.lower() for r in required if r.marker is None}
    assert unconditional == {"django", "djangorestframework", "celery"}


def test_the_sdist_holds_the_license_readme_and_changelog(distributions):
    sdist, _wheel = distributions
    with tarfile.open(sdist) as archive:
        # Every member sits in one folder named after the release.
        names = {name.partition("/")[2] for name in archive.getnames()}
    assert {"LICENSE", "README.md", "CHANGELOG.md"} <= names
