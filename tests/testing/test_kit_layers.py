"""Each app owns its proof kit: a kit imports its own app and the shared
machinery, never another app's kit; the old ``idempotency.testing`` paths
still work, and warn, for one release.

A scan of the kits' source (every import, at module level or in a function),
so a new upward or sideways arrow fails here.
"""

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FEATURES = ("idempotency", "inbox", "outbox", "webhooks")
KITS = {
    "idempotency.shared.testing": "idempotency.shared",
    "idempotency.testing": "idempotency",
    "inbox.testing": "inbox",
    "outbox.testing": "outbox",
    "webhooks.testing": "webhooks",
}
# The deprecated re-exports: the only arrows out of a kit, for one release.
MOVED = {
    "idempotency.testing.consumers": "inbox.testing.consumers",
    "idempotency.testing.deliveries": "webhooks.testing.deliveries",
    "idempotency.testing.events": "outbox.testing.events",
    "idempotency.testing.signing": "webhooks.testing.signing",
    "idempotency.testing.clock": "idempotency.shared.testing.clock",
    "idempotency.testing.crashes": "idempotency.shared.testing.crashes",
    "idempotency.testing.threads": "idempotency.shared.testing.threads",
}
MOVED_SUITES = {
    "ConsumerSuite": "inbox.testing.suites",
    "WebhookSuite": "webhooks.testing.suites",
    "SignedDelivery": "webhooks.testing.signing",
}
DEPRECATED = {*MOVED, "idempotency.testing.suites"}


def kit_modules(package: str) -> list[str]:
    folder = ROOT / package.replace(".", "/")
    return sorted(
        f"{package}.{path.stem}".removesuffix(".__init__")
        for path in folder.glob("*.py")
    )


def imports(module: str) -> set[str]:
    """Every module ``module`` imports, relative imports resolved."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.add(name)
    return found


def other_features(module: str, owner: str) -> set[str]:
    """The imports of ``module`` that reach a feature other than ``owner``."""
    crossing = set()
    for name in imports(module):
        top = name.split(".")[0]
        if top not in FEATURES or name.startswith("idempotency.shared"):
            continue
        if owner == "idempotency.shared" or top != owner:
            crossing.add(name)
    return crossing


@pytest.mark.parametrize(
    ("module", "owner"),
    [
        (module, owner)
        for kit, owner in KITS.items()
        for module in kit_modules(kit)
        if module not in DEPRECATED
    ],
)
def test_a_kit_imports_its_own_app_and_the_shared_machinery_only(module, owner):
    # The shared machinery's owner is no feature: it may import none of them.
    assert other_features(module, owner) == set()


def test_the_deprecated_paths_are_the_only_arrows_and_point_at_the_new_homes():
    for old, new in MOVED.items():
        assert other_features(old, "idempotency") <= {new}, old
    assert other_features("idempotency.testing.suites", "idempotency") == {
        "inbox.testing.suites",
        "webhooks.testing.suites",
    }


def fresh_import(name: str, monkeypatch):
    """Import ``name`` anew (its warning runs once per process otherwise)."""
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_still_works_and_warns(old, monkeypatch):
    new = importlib.import_module(MOVED[old])

    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        module = fresh_import(old, monkeypatch)

    assert new.__all__
    for name in new.__all__:
        assert getattr(module, name) is getattr(new, name)


@pytest.mark.parametrize("name", sorted(MOVED_SUITES))
def test_an_old_suite_path_still_works_and_warns(name):
    from idempotency.testing import suites

    new = importlib.import_module(MOVED_SUITES[name])
    with pytest.warns(DeprecationWarning, match=f"suites.{name} moved to"):
        moved = getattr(suites, name)
    assert moved is getattr(new, name)


def test_the_keys_suite_is_at_home_and_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from idempotency.testing.suites import EndpointSuite  # noqa: F401

    with pytest.raises(ImportError):
        from idempotency.testing.suites import NoSuchSuite  # noqa: F401
