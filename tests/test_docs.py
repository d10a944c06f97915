"""The reference pages in docs/ say what the code does."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
