"""A server with DEBUG off, no LOGGING, and an IDEMPOTENCY TTL of 0."""

from tests.faults.settings import *  # noqa: F403

IDEMPOTENCY = {"TTL": 0}
