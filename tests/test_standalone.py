"""The suite stands alone: outside the demo's own tests (tests/shop), no test
imports the demo project or names one of its modules."""

import ast
import json
import os
import re
import subprocess
import sys
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


# The servers the tests reach come from tests/servers.py; these are the two
# addresses of a broker that is down, and the private redis-server the fault
# tests start on a free port.
SERVER_ADDRESS = re.compile(r"\b(?:redis|amqp|postgres(?:ql)?)://[^\"'\s]*")
NOT_A_SHARED_SERVER = {
    "amqp://guest:guest@127.0.0.1:1//",
    "redis://127.0.0.1:1/11",
    "redis://127.0.0.1:{self.port}/0",
    # tests/idempotency/shared/test_kicks.py: a port held bound, nothing on it
    "redis://127.0.0.1:{}/0",
    "amqp://127.0.0.1:{}//",
    # tests/outbox/test_publishers.py: a listener that never answers
    "amqp://127.0.0.1:{port}//",
    # tests/inbox/test_checks.py: a URL kombu cannot read
    "redis://localhost:notaport/0",
}


def test_no_test_names_a_server_but_tests_servers():
    found = {
        (str(path.relative_to(TESTS)), address)
        for path in TESTS.rglob("*.py")
        if path not in (TESTS / "servers.py", Path(__file__))
        for address in SERVER_ADDRESS.findall(path.read_text())
        if address not in NOT_A_SHARED_SERVER
    }
    assert found == set()


SERVERS_SCRIPT = """
import json
from tests import servers
print(json.dumps([servers.OUTBOX_REDIS_URL, servers.INBOX_REDIS_URL,
                  servers.AMQP_URL, servers.database()]))
"""


def test_the_servers_come_from_the_environment():
    variables = {
        "TEST_DATABASE_URL": "postgres://tester:p%40ss@db.example:6543/main",
        "TEST_DATABASE_NAME": "test_mine",
        "TEST_DATABASE_SERVER_SIDE_BINDING": "1",
        "TEST_REDIS_URL": "redis://cache.example:6380/",
        "TEST_REDIS_DB_OUTBOX": "3",
        "TEST_AMQP_URL": "amqp://rabbit.example//",
    }
    result = subprocess.run(
        [sys.executable, "-c", SERVERS_SCRIPT],
        cwd=TESTS.parent,
        env={**os.environ, "TEST_REDIS_DB_INBOX": "", **variables},
        capture_output=True,
        text=True,
        check=True,
    )
    outbox, inbox, amqp, database = json.loads(result.stdout)
    assert outbox == "redis://cache.example:6380/3"
    assert inbox == "redis://cache.example:6380/9"  # empty: the default
    assert amqp == "amqp://rabbit.example//"
    assert database == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "main",
        "USER": "tester",
        "PASSWORD": "p@ss",
        "HOST": "db.example",
        "PORT": 6543,
        "TEST": {"NAME": "test_mine"},
        "OPTIONS": {"server_side_binding": True},
    }


def test_every_variable_is_documented():
    read = re.findall(r'_(?:env|redis_db)\("(TEST_\w+)"', _read("tests/servers.py"))
    docs = _read("docs/index.md")
    section = docs[docs.index("## Running the tests") :]
    assert len(read) == 11
    assert [name for name in read if f"| `{name}` |" not in section] == []


def _read(path):
    return (TESTS.parent / path).read_text()
