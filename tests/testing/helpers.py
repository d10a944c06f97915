"""What the kits' tests share: a widget body, a count, a failure's report."""

import uuid

import pytest

from idempotency.shared.testing.guarantees import GuaranteeBroken
from tests.testapp.models import Widget


def new_widget():
    """A request body the widget views accept, new each time."""
    return {"name": f"w-{uuid.uuid4().hex[:12]}"}


def widget_count():
    return Widget.objects.count()


def broken_message(check, *args) -> str:
    """Run ``check``, which must fail, and return what it reports."""
    with pytest.raises(GuaranteeBroken) as caught:
        check(*args)
    return str(caught.value)
