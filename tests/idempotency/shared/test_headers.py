"""The wire format's header names are spelled once, in idempotency.shared."""

import ast
from pathlib import Path

import pytest

from idempotency.shared.headers import EVENT_HEADERS, MESSAGE_ID_HEADER
from inbox.api import message_id_from
from outbox.models import OutboxMessage
from outbox.publishers import envelope

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("idempotency", "outbox", "inbox", "webhooks")


def modules_spelling(name):
    """The modules of the apps that write ``name`` as a string literal."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            if any(
                isinstance(node, ast.Constant) and node.value == name
                for node in ast.walk(tree)
            ):
                found.append(path.relative_to(ROOT).as_posix())
    return found


@pytest.mark.parametrize("name", [MESSAGE_ID_HEADER, EVENT_HEADERS])
def test_each_header_name_is_spelled_in_one_module(name):
    assert modules_spelling(name) == ["idempotency/shared/headers.py"]


def test_the_inbox_reads_the_id_in_the_header_the_outbox_writes_it_in():
    message = OutboxMessage(
        aggregatetype="order", aggregateid="1", type="order.created", payload={}
    )
    _, headers = envelope(message)
    del headers["id"]  # Debezium's header, the inbox's second choice

    assert message_id_from(headers) == str(message.id)
