"""The payment view of docs/steps.md, as written, answers bad input with a
readable 400 before any step: the page's example is what teams copy."""

import json
import re

import pytest
from rest_framework.test import APIRequestFactory, force_authenticate

from idempotency.models import IdempotencyRecord
from idempotency.shared.steps.models import UnitRecord
from tests.test_docs import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

FIRST_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


class Provider:
    """The card provider the example calls: records each charge."""

    def __init__(self):
        self.charges = []

    def charge(self, amount, idempotency_key):
        self.charges.append((amount, idempotency_key))
        return {"id": f"ch_{len(self.charges)}", "risk": "normal"}

    def refund(self, charge_id, idempotency_key):
        pass


def documented_payment_view(provider):
    page = (ROOT / "docs" / "steps.md").read_text()
    code = FIRST_PYTHON_BLOCK.search(page).group(1)
    assert "class PaymentView(" in code
    # The example's own names for the outside world and the model.
    namespace = {"provider": provider, "Payment": None, "__name__": "steps_doc"}
    exec(compile(code, "docs/steps.md", "exec"), namespace)
    return namespace["PaymentView"].as_view()


@pytest.mark.parametrize(
    "body", [{}, {"amount": "ten"}, {"amount": [5]}, {"amount": None}]
)
def test_the_documented_payment_view_answers_bad_input_with_400(user, body):
    provider = Provider()
    view = documented_payment_view(provider)
    request = APIRequestFactory().post(
        "/payments/",
        json.dumps(body),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="pay-1",
    )
    force_authenticate(request, user)

    response = view(request)

    assert response.status_code == 400, response
    assert "amount" in json.loads(response.rendered_content)
    assert provider.charges == []
    # Refused before any step: neither the key nor a unit is left behind.
    assert not IdempotencyRecord.objects.exists()
    assert not UnitRecord.objects.exists()
