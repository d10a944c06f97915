"""The import contracts (pyproject's ``[tool.importlinter]``) name every
module of the keys feature, so a new one cannot slip past them."""

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def contract(contract_id):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    (found,) = [
        c for c in config["importlinter"]["contracts"] if c["id"] == contract_id
    ]
    return found


def the_base_apps_modules_above_shared():
    package = ROOT / "idempotency"
    names = {
        path.stem if path.is_file() else path.name
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path / "__init__.py").exists()
    }
    return {f"idempotency.{name}" for name in names - {"shared"}}


@pytest.mark.parametrize("contract_id", ["shared", "above-shared"])
def test_the_contract_forbids_every_module_of_the_keys_feature(contract_id):
    forbidden = set(contract(contract_id)["forbidden_modules"])
    above = the_base_apps_modules_above_shared()
    if contract_id == "above-shared":
        above.discard("idempotency.console")  # the source itself
    assert sorted(above - forbidden) == []
