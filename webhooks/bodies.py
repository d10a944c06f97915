"""Webhook bodies, read as the JSON event handlers get."""

import json
from urllib.parse import parse_qsl

# The form GitHub sends when a hook's content type is "form": one field,
# payload, holding the url-encoded JSON event.
FORM = "application/x-www-form-urlencoded"


def json_object(body: bytes, content_type: str | None) -> dict:
    """The JSON object ``body`` carries; raise ``ValueError`` when it has none.

    A form body carries it in its one ``payload`` field (GitHub); any other
    body is the JSON itself. The intake refuses what this refuses and
    ``Event.data`` reads the stored body through it, so a body accepted at
    intake always reads when it is processed.
    """
    text = body.decode("utf-8")
    if (content_type or "").split(";")[0].strip().lower() == FORM:
        text = _form_payload(text)
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _form_payload(text):
    fields = parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    if [name for name, _value in fields] != ["payload"]:
        raise ValueError("a form body needs one payload field and no other")
    return fields[0][1]
