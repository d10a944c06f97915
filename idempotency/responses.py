"""Which responses are stored, what of them is kept, and how they replay."""

from django.http import HttpResponse

from .conf import NEVER_REPLAYED, idempotency_settings

REPLAYED_HEADER = "Idempotent-Replayed"
ALWAYS_REPLAYED = ("Content-Type", "Location")

_NOT_STORABLE = frozenset({408, 409, 425, 429})


def is_storable(status_code: int) -> bool:
    """Store every final answer below 500 but the ones that invite a retry."""
    return status_code < 500 and status_code not in _NOT_STORABLE


def replay_header_names() -> tuple[str, ...]:
    extra = tuple(idempotency_settings.REPLAY_HEADERS)
    names = ALWAYS_REPLAYED + extra
    return tuple(name for name in names if name.lower() not in NEVER_REPLAYED)


def capture(response) -> tuple[int, bytes, dict]:
    """Return the status, body bytes and allow-listed headers to store."""
    headers = {
        name: response[name] for name in replay_header_names() if name in response
    }
    return response.status_code, bytes(response.content), headers


def replay(record) -> HttpResponse:
    response = HttpResponse(
        bytes(record.response_body or b""), status=record.status_code
    )
    if "Content-Type" not in record.response_headers:
        del response["Content-Type"]
    for name, value in record.response_headers.items():
        response[name] = value
    response[REPLAYED_HEADER] = "true"
    return response
