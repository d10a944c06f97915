"""Under gunicorn with two workers, one scrape adds up what every worker
counted (prometheus-client's multiprocess mode), and reads the gauges once."""

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from itertools import count

import pytest

from tests.conftest import basic_auth
from tests.faults.processes import gunicorn

from .scraping import samples, value

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

CLAIMED = {
    "operation": "widget.create",
    "mode": "atomic",
    "outcome": "claimed",
    "reason": "",
}


def post_widget(base, key, auth):
    request = urllib.request.Request(
        f"{base}/t/widgets/",
        data=json.dumps({"name": key}).encode(),
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": key,
            "Authorization": auth,
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status


def scrape(base):
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
        return samples(answer.read().decode())


def workers_that_counted(directory):
    """The pids with a counter file: each worker writes its own."""
    return {path.stem.rsplit("_", 1)[1] for path in directory.glob("counter_*.db")}


def test_a_scrape_adds_up_the_counts_of_both_workers(tmp_path, make_user):
    user = make_user()
    auth = basic_auth(user.username)
    keys = (f"key-{n}" for n in count())
    created = 0
    with (
        gunicorn(
            workers=2,
            settings="tests.idempotency.prometheus.server_settings",
            PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
        ) as base,
        ThreadPoolExecutor(max_workers=6) as pool,
    ):
        # Concurrent requests: a worker busy with one leaves the next to the
        # other. Rounds until both have counted (a bounded number of them).
        for _round in range(20):
            batch = [next(keys) for _ in range(12)]
            statuses = list(pool.map(lambda key: post_widget(base, key, auth), batch))
            created += statuses.count(201)
            if len(workers_that_counted(tmp_path)) == 2:
                break
        assert len(workers_that_counted(tmp_path)) == 2, "one worker got them all"

        # Whichever worker answers the scrape, it reports every worker's count.
        for _scrape in range(4):
            scraped = scrape(base)
            assert value(scraped, "once_keys_total", **CLAIMED) == created
            assert value(scraped, "once_keys_pending") == 0
    assert created >= 12
