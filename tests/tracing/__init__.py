"""OpenTelemetry's SDK for the tests: spans kept in this process's memory, or,
in the servers and workers a test starts, written to a file per process that
the test reads (``ONCE_TEST_SPANS_DIR``)."""

import json
import os
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from idempotency.shared import tracing

SPANS_DIR = "ONCE_TEST_SPANS_DIR"


def in_memory(monkeypatch) -> InMemorySpanExporter:
    """Record the library's spans in memory for one test, without setting the
    process's global tracer provider (other tests would record too)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer", provider.get_tracer("tests"))
    return exporter


def tracer_for(exporter):
    """A tracer exporting to ``exporter``: the test's own spans (a request's)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("tests")


class FileSpanExporter(SpanExporter):
    """Append each finished span, as one JSON line, to this process's file."""

    def __init__(self, directory):
        self.path = Path(directory) / f"{os.getpid()}.jsonl"

    def export(self, spans):
        with self.path.open("a") as out:
            for span in spans:
                out.write(json.dumps(as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def as_dict(span) -> dict:
    def ids(context):
        return {
            "trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x"),
        }

    return {
        "name": span.name,
        "kind": span.kind.name,
        **ids(span.context),
        "parent": ids(span.parent) if span.parent else None,
        "links": [ids(link.context) for link in span.links],
        "attributes": dict(span.attributes),
        "status": span.status.status_code.name,
        "pid": os.getpid(),
    }


def export_to_files_if_asked():
    """In a child process: export every span to ``$ONCE_TEST_SPANS_DIR``."""
    directory = os.environ.get(SPANS_DIR)
    if directory:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(directory)))
        trace.set_tracer_provider(provider)


def read_spans(directory) -> list[dict]:
    """Every span the child processes exported, from their files."""
    return [
        json.loads(line)
        for path in sorted(Path(directory).glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
