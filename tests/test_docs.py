"""The reference pages in docs/ say what the code does."""

import importlib
import importlib.util
import re
from pathlib import Path

from idempotency.shared.settings import AppSettings

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
    # render() refuses an option without a doc.
    expected = reference.render()
    assert reference.SETTINGS_MD.read_text() == expected, (
        "docs/settings.md is not what the option tables say: run make docs"
    )


def test_every_option_says_what_it_means():
    reference = load_reference()
    undocumented = {
        title: keys
        for title, _introduction, options in reference.tables()
        if (keys := reference.undocumented(options))
    }
    assert undocumented == {}, "give these options a doc="


def test_the_settings_page_has_a_table_for_every_settings_object():
    on_the_page = {
        id(option)
        for _title, _introduction, options in load_reference().tables()
        for option in options.values()
    }
    modules = [*(f"{app}.conf" for app in APPS), "idempotency.shared.conf"]
    unlisted = [
        f"{module}.{name}[{key!r}]"
        for module in modules
        for name, value in vars(importlib.import_module(module)).items()
        if isinstance(value, AppSettings)
        for key, option in value.options.items()
        if id(option) not in on_the_page
    ]
    assert unlisted == [], "add their table to TABLES in docs/reference.py"


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


def test_each_check_row_names_every_setting_it_checks():
    # A reader looks a check id up there: its row must name the key at fault.
    rows = dict(
        re.findall(r"^\| `([a-z]+\.[EW]\d{3})` \| (.*) \|$", _page("checks.md"), re.M)
    )
    unnamed = [
        f"{option.check_id}: {title}[{key!r}]"
        for title, _introduction, options in load_reference().tables()
        for key, option in options.items()
        if key not in rows.get(option.check_id, "")
    ]
    assert unnamed == [], "name these keys in their rows of docs/checks.md"


# A problem type: an exception's ``type``, a literal ``slug=``, and for refused
# webhooks "webhook-" + each reason a verifier raises.
PROBLEM_TYPE = re.compile(r'^\s+type = "([a-z-]+)"$|slug="([a-z-]+)"', re.M)
RAISED_REASON = re.compile(r"(?:VerificationFailed|Failed)\(([A-Z_]+)\b")
REASON = re.compile(r'^([A-Z_]+) = "([a-z-]+)"$', re.M)


def test_the_problems_page_has_a_section_per_problem_type():
    sources = [p.read_text() for app in APPS for p in (ROOT / app).rglob("*.py")]
    in_code = {
        slug
        for text in sources
        for match in PROBLEM_TYPE.findall(text)
        for slug in match
        if slug
    }
    reasons = dict(REASON.findall(_read("webhooks/exceptions.py")))
    raised = {name for text in sources for name in RAISED_REASON.findall(text)}
    in_code |= {f"webhook-{reasons[name]}" for name in raised & set(reasons)}
    page = _read("idempotency/shared/problem_types.md")
    documented = set(re.findall(r"^## ([a-z-]+)$", page, re.M))
    assert "key-reused" in in_code and "webhook-bad-signature" in in_code
    assert sorted(in_code - documented) == [], "add them to problem_types.md"


def _read(path):
    return (ROOT / path).read_text()


def _page(name):
    return (ROOT / "docs" / name).read_text()


# A Markdown link to a file of the repository: [text](path#anchor).
RELATIVE_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)#\s]+)(?:#([^)\s]+))?\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def _anchors(text):
    """The anchors of a page's headings, as GitHub and the site make them."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # not code
    return {
        re.sub(r"[^\w\- ]", "", heading).strip().lower().replace(" ", "-")
        for heading in HEADING.findall(text)
    }


def test_the_readme_links_to_files_and_headings_that_exist():
    # The site's own links are checked by its strict build; the README is not
    # part of the site, so its links are checked here.
    broken = []
    for path, anchor in RELATIVE_LINK.findall(_read("README.md")):
        target = ROOT / path
        if not target.is_file():
            broken.append(path)
        elif anchor and anchor not in _anchors(target.read_text()):
            broken.append(f"{path}#{anchor}")
    assert broken == []


# A test named in the docs: `tests/<path>.py::[Class::]test_name[params]`.
NAMED_TEST = re.compile(r"`(tests/[\w/]+\.py)((?:::\w+)+)(?:\[[^`]*\])?`")


def test_every_test_the_docs_name_exists():
    # A suite class's tests come from the proof kits it subclasses.
    kits = "".join(
        p.read_text() for app in APPS for p in (ROOT / app).rglob("testing/*.py")
    )
    missing = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for path, names in NAMED_TEST.findall(page.read_text()):
            source = ROOT / path
            *classes, function = names.strip(":").split("::")
            text = source.read_text() if source.exists() else ""
            found = all(f"class {name}" in text for name in classes) and (
                f"def {function}(" in text or (classes and f"def {function}(" in kits)
            )
            if not found:
                missing.append(f"{page.name}: {path}{names}")
    assert missing == []
