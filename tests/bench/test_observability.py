"""The observability bench's modes turn on what they name, and leaving one
puts back the default: every mode is measured against a clean off."""

import pytest
from opentelemetry.sdk.trace import TracerProvider

from bench import observability
from idempotency import signals as keys_signals
from idempotency.shared import tracing


def state() -> dict:
    signals = observability._signals()
    return {
        "noop": sum(
            any(entry[0][0] == observability.UID for entry in s.receivers)
            for s in signals
        ),
        # The keys' claimed signal has a receiver only while metrics are on.
        "metrics": any(
            entry[0][0].startswith("once-metrics:")
            for entry in keys_signals.key_claimed.receivers
        ),
        "tracer": tracing.tracer,
        "library": tracing.ENABLED,
    }


@pytest.fixture
def modes():
    sdk_tracer = TracerProvider().get_tracer("tests")
    return sdk_tracer, observability._modes(sdk_tracer)


def test_each_mode_turns_on_what_it_names_and_leaving_it_puts_back_off(modes):
    sdk_tracer, modes = modes
    off = state()
    count = len(observability._signals())
    expected = {
        observability.OFF: {},
        observability.SIGNALS: {"noop": count},
        observability.METRICS: {"metrics": True},
        observability.SPAN_ONLY: {"tracer": sdk_tracer, "library": False},
        observability.TRACING: {"tracer": sdk_tracer},
        observability.ALL: {"noop": count, "metrics": True, "tracer": sdk_tracer},
    }
    assert off["noop"] == 0 and off["metrics"] is False and off["library"] is True
    assert set(expected) == set(modes)
    for name, (turned_on, _in_span) in modes.items():
        with turned_on():
            assert state() == {**off, **expected[name]}, name
        assert state() == off, name
