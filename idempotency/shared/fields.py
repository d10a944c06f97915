"""The columns every app's rows have alike, declared once: a state among
its ``TextChoices`` and the end of a worker's lease."""

from django.db import models
from django.utils.translation import gettext_lazy as _


def state(choices: type[models.TextChoices], **kwargs) -> models.CharField:
    """``state``: one of ``choices``; ``kwargs`` as for the field (its
    ``default``)."""
    return models.CharField(
        _("state"), max_length=16, choices=choices.choices, **kwargs
    )


def lease_end(**kwargs) -> models.DateTimeField:
    """``locked_until``: when the lease of the worker on the row ends, NULL
    when none holds it; ``kwargs`` as for the field (its ``help_text``)."""
    return models.DateTimeField(_("locked until"), null=True, blank=True, **kwargs)
