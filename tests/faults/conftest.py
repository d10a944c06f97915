"""Fixtures of the fault tests."""

from .intake import intake  # noqa: F401 (a fixture)
