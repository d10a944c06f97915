"""Parse the Idempotency-Key header value."""

import re

from .exceptions import KeyMalformed

MAX_LENGTH = 255
# Visible ASCII, 0x21 to 0x7E: one regex match instead of a loop per character.
_VISIBLE = re.compile(r"[\x21-\x7e]*")
# RFC 8941 parameters of an sf-item: ;key[=bare-item] (an integer or decimal,
# string, token, byte sequence or boolean), each ";" may be followed by spaces.
PARAMETERS = (
    r"(?:;\x20*[a-z*][a-z0-9_.*-]*"
    r"(?:=(?:-?[0-9]{1,15}(?:\.[0-9]{1,3})?"
    r'|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"'
    r"|[A-Za-z*][!#$%&'*+.^_`|~0-9A-Za-z:/-]*"
    r"|:[A-Za-z0-9+/=]*:"
    r"|\?[01]))?)*"
)
_PARAMETERS = re.compile(PARAMETERS)


def parse(raw: str | None) -> str | None:
    """Return the key, ``None`` when absent, or raise ``KeyMalformed``.

    Accepts a bare token or the structured-field string form (``"abc"``,
    RFC 8941) and requires 1-255 visible ASCII characters once unquoted. A
    comma belongs to a key only in the quoted form (``"a,b"``). The quoted
    form is an sf-item and may carry parameters (``"abc";p=1``), which the
    draft defines none of: they are ignored, the key is the string.
    """
    if raw is None:
        return None
    value = raw.strip(" \t")
    if value.startswith('"'):
        value = _unquote(_without_parameters(value))
    elif "," in value:
        # WSGI and ASGI servers join a header sent twice into one value with
        # commas (RFC 9110, section 5.3), so "k1,k2" may be two keys: refuse
        # it rather than run it as a third. A bare RFC 8941 token cannot hold
        # a comma either; a key that has one is sent quoted.
        raise KeyMalformed(
            "The key has a comma: the header was sent more than once. "
            'Send a key with a comma in the quoted form ("a,b").'
        )
    if not value:
        raise KeyMalformed("The key is empty.")
    if len(value) > MAX_LENGTH:
        raise KeyMalformed(f"The key is longer than {MAX_LENGTH} characters.")
    if not _VISIBLE.fullmatch(value):
        raise KeyMalformed("The key must be visible ASCII characters only.")
    return value


def _without_parameters(value: str) -> str:
    """The inside of a quoted key, without the sf-item parameters after it."""
    end = 1
    while end < len(value) and value[end] != '"':
        end += 2 if value[end] == "\\" else 1
    if end >= len(value):
        raise KeyMalformed("The quoted key has no closing quote.")
    if not _PARAMETERS.fullmatch(value, end + 1):
        raise KeyMalformed(
            "The quoted key has an unescaped quote, or is followed by "
            "something other than parameters (was the header sent more than "
            "once?)."
        )
    return value[1:end]


def _unquote(inner: str) -> str:
    # RFC 8941 sf-string: only \" and \\ are escapes; a lone quote is invalid.
    chars = []
    escaped = False
    for char in inner:
        if escaped:
            if char not in '"\\':
                raise KeyMalformed("The quoted key has an invalid escape.")
            chars.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            raise KeyMalformed(
                "The quoted key has an unescaped quote (was the header sent "
                "more than once?)."
            )
        else:
            chars.append(char)
    if escaped:
        raise KeyMalformed("The quoted key ends inside an escape.")
    return "".join(chars)
