"""The reference pages in docs/ say what the code does."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPS = ("idempotency", "outbox", "inbox", "webhooks")
CHECK_ID = re.compile(r"""["']((?:idempotency|outbox|inbox|webhooks)\.[EW]\d{3})["']""")


def load_reference():
    path = ROOT / "docs" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_settings_page_lists_every_key_with_its_default_and_meaning():
    reference = load_reference()
    # render() refuses a key without a comment in its option table.
    expected = reference.render()
    assert reference.SETTINGS_MD.read_text() == expected, (
        "docs/settings.md is not what the option tables say: run make docs"
    )


def test_the_checks_page_lists_every_check_id():
    in_code = {
        check_id
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        for check_id in CHECK_ID.findall(path.read_text())
    }
    documented = set(
        re.findall(r"^\| `([a-z]+\.[EW]\d{3})` \|", _page("checks.md"), re.M)
    )
    assert in_code, "no check id found in the apps' code"
    assert sorted(in_code - documented) == [], "add them to docs/checks.md"


def _page(name):
    return (ROOT / "docs" / name).read_text()
