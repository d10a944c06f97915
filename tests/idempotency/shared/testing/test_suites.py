"""What every kit's suite and check share: the case built from the suite's
attributes, and the report of a broken guarantee."""

from dataclasses import dataclass, field

import pytest

from idempotency.shared.testing.guarantees import (
    CannotCheck,
    GuaranteeBroken,
    Problems,
    require_an_effect,
)
from idempotency.shared.testing.suites import Suite


@dataclass
class Probe:
    source: str
    effects: object
    url: str | None = None
    tags: list = field(default_factory=list)


class ProbeSuite(Suite):
    source = "github"
    url = "/hooks/github/"
    tags = ["from the suite"]

    def effects(self):
        return 1


def test_a_suites_case_takes_each_field_from_the_attribute_of_that_name():
    suite = ProbeSuite()

    probe = suite._subject(Probe)

    assert probe.source == "github"
    assert probe.url == "/hooks/github/"
    assert probe.tags == ["from the suite"]
    assert probe.effects() == 1


def test_a_field_given_replaces_the_suites_attribute():
    assert ProbeSuite()._subject(Probe, source="stripe").source == "stripe"


def test_a_required_field_the_suite_lacks_is_named():
    class Forgetful(Suite):
        pass

    with pytest.raises(NotImplementedError, match=r"^Forgetful must set source\.$"):
        Forgetful()._subject(Probe)


def test_problems_found_break_the_guarantee_with_context_first_evidence_last():
    problems = Problems("a retry replays", "POST /orders/ with key k")
    problems.append("the view ran again")
    problems.append("the retry's body differs")

    with pytest.raises(GuaranteeBroken) as broken:
        problems.raise_if_any("retry: 201")

    assert broken.value.guarantee == "a retry replays"
    assert broken.value.evidence == [
        "POST /orders/ with key k",
        "the view ran again",
        "the retry's body differs",
        "retry: 201",
    ]


def test_no_problem_found_keeps_the_guarantee():
    Problems("a retry replays", "POST /orders/ with key k").raise_if_any("retry: 201")


def test_a_clean_run_that_left_the_effects_where_they_were_cannot_be_checked():
    with pytest.raises(CannotCheck) as refused:
        require_an_effect(
            "consumer",
            {"mail": 0},
            {"mail": 0},
            when="when notify consumed a message",
            advice="count the mail it sends.",
        )

    assert str(refused.value) == (
        "The proof kit cannot run 'consumer': effects() stayed {'mail': 0} when "
        "notify consumed a message; count the mail it sends."
    )
    require_an_effect("consumer", 0, 1, when="", advice="")  # it grew: checkable


def test_a_suite_without_a_payload_is_named():
    """The payload is required by every suite that sends one: without it the
    consumer got payload=None and failed in its own code, and the endpoint
    got a JSON null."""
    from idempotency.testing.suites import EndpointSuite
    from inbox.testing.suites import ConsumerSuite

    class TestNoConsumerPayload(ConsumerSuite):
        consumer = staticmethod(lambda **kwargs: None)
        event_type = "order.created"

    class TestNoEndpointPayload(EndpointSuite):
        url = "/orders/"

    with pytest.raises(
        NotImplementedError, match=r"^TestNoConsumerPayload must set payload\.$"
    ):
        TestNoConsumerPayload().consumer_under_test()
    with pytest.raises(
        NotImplementedError, match=r"^TestNoEndpointPayload must set payload\.$"
    ):
        TestNoEndpointPayload().endpoint()
