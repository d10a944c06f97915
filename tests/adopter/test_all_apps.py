"""All four apps in an adopter's project, as the README sets them up: a keyed
order's event goes through the outbox, a real ``celery -A mysite worker`` and
the user's inbox consumer; a signed GitHub delivery runs the user's handler.

The README decides the publisher (``OUTBOX["PUBLISHER"]``); nothing here
depends on which one it is, so switching it is a change of the README alone.
"""

import hashlib
import hmac
import json
import secrets
import uuid
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest

from .project import (
    ALL_APPS_BLOCKS,
    PROJECT,
    REDIS_URL,
    Database,
    Process,
    Project,
    api_headers,
    delete_redis_keys,
    post,
    wait_until,
)

pytestmark = [pytest.mark.adopter, pytest.mark.postgresql]

GITHUB_SECRET = secrets.token_hex(32)
# The README consumer's subscriber, and the relay's task name.
SUBSCRIBER = "orders.ship"
RELAY = "outbox.relay"


@dataclass
class Site:
    project: Project
    database: Database
    worker: Process
    server: Process

    def logs(self) -> str:
        return self.worker.tail() + self.server.tail()


@pytest.fixture(scope="module")
def site(venv, adopter_workdir):
    project = Project(
        adopter_workdir / "all-apps",
        venv,
        CELERY_BROKER_URL=REDIS_URL,
        GITHUB_WEBHOOK_SECRET=GITHUB_SECRET,
    )
    database = Database()
    project.append(f"{PROJECT}/settings.py", database.settings())
    prefix = project.isolate_redis_keys()
    project.use(*ALL_APPS_BLOCKS)
    try:
        database.create()
        project.set_up()
        with project.worker() as worker, project.server() as server:
            yield Site(project, database, worker, server)
    finally:
        database.drop()
        delete_redis_keys(prefix)


def test_check_is_clean_for_the_documented_configuration(site):
    checked = site.project.manage("check", "--fail-level", "WARNING")
    assert "no issues" in checked.stdout


def test_an_order_event_is_applied_once_and_its_redelivery_dropped(site):
    db = site.database
    answer = post(
        f"{site.server.url}/api/orders/",
        json.dumps({"sku": "BOOK-1", "quantity": 1}).encode(),
        api_headers(key=f"order-{uuid.uuid4()}"),
    )
    assert answer.status == 201, answer.body.decode() + site.logs()
    order = json.loads(answer.body)["id"]
    # The view recorded the order's event, which carries the message id.
    message = db.value(
        "SELECT id::text FROM outbox_message WHERE aggregateid = %s", str(order)
    )
    assert message, "the view recorded no outbox event"

    def shipments():
        return db.value(
            "SELECT count(*) FROM orders_shipment WHERE order_id = %s", order
        )

    def inbox_duplicates():
        return db.value(
            "SELECT duplicates FROM inbox_message "
            "WHERE subscriber = %s AND message_id = %s",
            SUBSCRIBER,
            message,
        )

    # No beat runs: only record()'s kick on commit can start the relay.
    wait_until(lambda: shipments() == 1, "the consumer shipped the order", site.worker)
    state = db.value("SELECT state FROM outbox_message WHERE id = %s", message)
    assert state == "published"
    assert inbox_duplicates() == 0

    # A relay that died after publishing and before marking the message
    # leaves it pending: the next relay publishes it again, same message id.
    db.execute(
        "UPDATE outbox_message SET state = 'pending', published_at = NULL, "
        "locked_until = NULL, available_at = now() WHERE id = %s",
        message,
    )
    site.project.run([site.project.venv.bin / "celery", "-A", PROJECT, "call", RELAY])

    wait_until(
        lambda: inbox_duplicates() == 1, "the inbox dropped the redelivery", site.worker
    )
    assert shipments() == 1, site.logs()
    state = db.value("SELECT state FROM outbox_message WHERE id = %s", message)
    assert state == "published"


def github_headers(body: bytes, delivery: str, event: str) -> dict:
    signature = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={signature}",
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Event": event,
        "User-Agent": "GitHub-Hookshot/adopter",
    }


def deliver_push_once(site, body: bytes, content_type: str, commit: str):
    """Deliver one push twice: its handler runs once, the resend is a duplicate."""
    delivery = str(uuid.uuid4())
    headers = {**github_headers(body, delivery, "push"), "Content-Type": content_type}
    url = f"{site.server.url}/webhooks/github/"

    first = post(url, body, headers)
    assert first.status == 202, first.body.decode() + site.logs()

    def receipt_state():
        return site.database.value(
            "SELECT state FROM webhooks_webhookreceipt "
            "WHERE source = 'github' AND delivery_id = %s",
            delivery,
        )

    wait_until(
        lambda: receipt_state() in ("processed", "failed", "skipped"),
        "the worker processed the receipt",
        site.worker,
    )
    assert receipt_state() == "processed", site.logs()
    builds = "SELECT count(*) FROM orders_build WHERE commit = %s"
    assert site.database.value(builds, commit) == 1

    again = post(url, body, headers)
    assert again.status == 200, again.body.decode()
    assert json.loads(again.body)["duplicate"] is True
    assert site.database.value(builds, commit) == 1


def push_event(commit: str) -> dict:
    return {"ref": "refs/heads/main", "before": "0" * 40, "after": commit}


def test_a_signed_github_delivery_runs_the_handler_once(site):
    commit = secrets.token_hex(20)
    body = json.dumps(push_event(commit)).encode()
    deliver_push_once(site, body, "application/json", commit)


def test_a_form_encoded_github_delivery_runs_the_handler_once(site):
    commit = secrets.token_hex(20)
    body = urlencode({"payload": json.dumps(push_event(commit))}).encode()
    deliver_push_once(site, body, "application/x-www-form-urlencoded", commit)


def test_purge_dry_run_counts_and_deletes_nothing(site):
    purged = site.project.manage("purge_idempotency", "--dry-run")
    for kind in ("idempotency", "outbox", "inbox", "webhooks"):
        assert f"{kind}: would delete" in purged.stdout, purged.stdout
