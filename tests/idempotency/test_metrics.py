"""The keys' counter counts each decision, by operation, mode and outcome."""

import pytest
from django.test import override_settings

from tests.idempotency.prometheus.scraping import METRICS_ON, scrape, value

pytestmark = pytest.mark.django_db(transaction=True)


def keys(scraped, outcome, reason=""):
    return value(
        scraped,
        "once_keys_total",
        operation="widget.create",
        mode="atomic",
        outcome=outcome,
        reason=reason,
    )


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_each_decision_is_counted_once_under_its_outcome(api, client):
    before = scrape(client)

    api.post("/t/widgets/", {"name": "a"}, key="k1")
    api.post("/t/widgets/", {"name": "a"}, key="k1")
    api.post("/t/widgets/", {"name": "b"}, key="k1")
    api.post("/t/widgets/", {"name": "c"}, key="k2")

    after = scrape(client)
    for outcome, count in [("claimed", 2), ("replayed", 1), ("mismatch", 1)]:
        assert keys(after, outcome) - keys(before, outcome) == count, outcome


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_failure_is_counted_with_its_reason(api, client):
    before = scrape(client)

    api.post("/t/widgets/", {"name": ""}, key="k-invalid")

    after = scrape(client)
    assert keys(after, "failed", "invalid") - keys(before, "failed", "invalid") == 1


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_no_label_holds_the_key_or_the_scope(api, client):
    api.post("/t/widgets/", {"name": "a"}, key="secret-key-1234")

    text = client.get("/metrics").content.decode()

    assert "once_keys_total" in text
    assert "secret-key-1234" not in text
    assert api.auth not in text and "alice" not in text


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_refused_key_is_counted_with_its_problem_as_the_reason(api, client):
    before = scrape(client)

    missing = api.post("/t/widgets/", {"name": "a"})
    malformed = api.post("/t/widgets/", {"name": "a"}, key="bad key\x7f")

    assert (missing.status_code, malformed.status_code) == (400, 400)
    after = scrape(client)
    for problem in ("key-missing", "key-malformed"):
        counted = keys(after, "refused", problem) - keys(before, "refused", problem)
        assert counted == 1, problem
