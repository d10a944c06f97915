"""The test app's clients of the outside services (``tests.fakes`` in tests).

Each call that can repeat sends its ``Idempotency-Key``; the mailer takes
none, so only a step's recovery point keeps a mail from going twice.
"""

import json
import os
import urllib.request

from tests.fakes import URL_VARIABLE


def _post(path: str, body: dict, key: str | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(
        os.environ[URL_VARIABLE] + path,
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def charge(key: str, amount: int) -> dict:
    return _post("/provider/charges", {"amount": amount}, key)


def refund(key: str, charge_id: str) -> dict:
    return _post("/provider/refunds", {"charge": charge_id}, key)


def book_shipment(key: str, payment_id: int) -> dict:
    return _post("/carrier/shipments", {"payment": payment_id}, key)


def send_mail(to: str, subject: str) -> dict:
    return _post("/mailer/mails", {"to": to, "subject": subject})
