"""Errors of the webhooks app."""

from django.core.exceptions import ImproperlyConfigured


class SourceMisconfigured(ImproperlyConfigured):
    """A source's settings would weaken verification; its deliveries are refused."""


class BodyRefused(Exception):
    """A body taken as unreadable before verification; rendered as problem+json."""

    status = 400
    type = "about:blank"
    title = "Webhook body refused."
    retry_after = None

    def __init__(self, detail=None):
        self.detail = detail or self.title
        super().__init__(self.detail)


class LengthRequired(BodyRefused):
    status = 411
    type = "webhook-length-required"
    title = "Content-Length required."


class BodyTooLarge(BodyRefused):
    status = 413
    type = "webhook-too-large"
    title = "Webhook body too large."


class EncodedBody(BodyRefused):
    status = 415
    type = "webhook-unsupported-encoding"
    title = "Webhook body must not be compressed."
