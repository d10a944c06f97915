"""idempotency.shared.tracing: W3C trace context through the propagator, and
nothing at all without the [otel] extra."""

import builtins
import importlib.util
import sys
from types import SimpleNamespace

from idempotency.shared import tracing

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def load_without_opentelemetry(monkeypatch):
    """A fresh copy of the module, imported where opentelemetry is missing."""
    for name in list(sys.modules):
        if name.partition(".")[0] == "opentelemetry":
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails
    # In the package: the module's relative imports resolve.
    spec = importlib.util.spec_from_file_location(
        "idempotency.shared.tracing_alone", tracing.__file__
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_the_api_every_function_is_a_no_op_that_imports_nothing(
    monkeypatch,
):
    alone = load_without_opentelemetry(monkeypatch)
    assert alone.ENABLED is False
    imported = []
    real_import = builtins.__import__

    def watching(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", watching)
    message = SimpleNamespace(headers={"traceparent": TRACEPARENT}, aggregatetype="a")

    assert alone.created("order", "m-1") == {}
    assert alone.carried({"traceparent": TRACEPARENT}) == {}
    assert alone.java_properties({"traceparent": TRACEPARENT}) == ""
    alone.annotate(**{"idempotency.outcome": "executed"})
    with alone.sending([message]) as send:
        alone.refused(send, 1, 1)
    with alone.processing("s", {"traceparent": TRACEPARENT}, "m-1") as process:
        pass
    with alone.webhook("receive", "github") as receive:
        pass
    assert (send, process, receive) == (None, None, None)
    assert imported == []  # no import attempt per call


def test_a_valid_context_is_written_again_and_a_malformed_one_dropped():
    headers = {"traceparent": TRACEPARENT, "tracestate": "a=1", "other": "x"}
    assert tracing.carried(headers) == {"traceparent": TRACEPARENT, "tracestate": "a=1"}
    # A header a caller chose reaches the transport only when well-formed.
    assert tracing.carried({"traceparent": TRACEPARENT + "\r\nX-Evil: 1"}) == {}
    assert tracing.carried({"traceparent": "00-ab"}) == {}
    assert tracing.carried({}) == {}


def test_debeziums_column_holds_the_context_as_java_properties():
    text = tracing.java_properties(
        {"traceparent": TRACEPARENT, "tracestate": "vendor=a:b"}
    )
    # Properties.store() escapes = and : in values.
    assert text == f"traceparent={TRACEPARENT}\ntracestate=vendor\\=a\\:b\n"
    assert tracing.java_properties({"traceparent": "junk"}) == ""
