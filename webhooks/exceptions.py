"""Errors of the webhooks app."""

from django.core.exceptions import ImproperlyConfigured


class SourceMisconfigured(ImproperlyConfigured):
    """A source's settings would weaken verification; its deliveries are refused."""
