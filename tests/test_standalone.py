"""The suite stands alone: outside the demo's own tests (tests/shop), no test
imports the demo project or names one of its modules."""

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
DEMO_TESTS = TESTS / "shop"
# The settings install the demo's app, so that the demo's tests run in the suite.
ALLOWED = {("settings.py", "project.shop")}
# An import line in a string: code a test runs in a subprocess (python -c).
IMPORT_LINE = re.compile(r"^\s*(?:from|import)\s+(project(?:\.\w+)*)\b", re.M)


def _is_demo(module) -> bool:
    return module == "project" or module.startswith("project.")


def demo_references(source: str) -> set[str]:
    """The demo modules ``source`` imports, or names in a string (a URLconf,
    an app, a ``celery -A`` argument, a script)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if _is_demo(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if _is_demo(node.module or ""):
                found.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("project."):
                found.add(node.value)
            found.update(IMPORT_LINE.findall(node.value))
    return found


def test_demo_references_are_found():
    code = (
        "import project.celery\n"
        "from project.shop import models\n"
        "include('project.urls')\n"
        "SCRIPT = '''\\nfrom project import settings\\n'''\n"
        "MISSING = ['project']  # a word, not a module path\n"
    )
    assert demo_references(code) == {
        "project.celery",
        "project.shop",
        "project.urls",
        "project",
    }


def test_no_test_outside_the_demos_own_imports_the_demo():
    found = {
        (str(path.relative_to(TESTS)), module)
        for path in TESTS.rglob("*.py")
        if not path.is_relative_to(DEMO_TESTS) and path != Path(__file__)
        for module in demo_references(path.read_text())
    }
    assert found == ALLOWED
