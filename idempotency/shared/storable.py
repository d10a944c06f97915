"""What PostgreSQL can store: a value refused at the edge, or escaped to fit."""

import decimal
import json

# Deeper JSON is refused where it is stored: Python's json module (the
# relay's, psycopg's, a consumer's) reads about 1,000 levels on 3.11, and
# fewer from deep in a call stack, so deeper values stored would fail there.
MAX_DEPTH = 500


def check_text(value: str, what: str) -> None:
    """Raise ValueError unless a text column can hold ``value``: PostgreSQL
    refuses a NUL, and UTF-8 cannot encode a lone surrogate."""
    if "\x00" in value:
        raise ValueError(f"{what} holds a NUL character, which cannot be stored")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError(
            f"{what} holds a lone surrogate, which UTF-8 cannot encode"
        ) from None


def check_column(value: str, field, what: str) -> None:
    """Raise ValueError unless the text column of ``field`` (a model field)
    can hold ``value``: at most its ``max_length`` characters, and text
    ``check_text`` takes."""
    limit = field.max_length
    if limit is not None and len(value) > limit:
        raise ValueError(
            f"{what} has {len(value)} characters, where at most {limit} are kept"
        )
    check_text(value, what)


def jsonb(value, what: str = "A JSON value", *, encoder=None):
    """``value`` as a jsonb column gives it back: tuples become lists, an
    object keeps the last of duplicate keys, in jsonb's order, and a float
    comes back as jsonb prints it (``read_back``).

    Raise TypeError for what JSON cannot encode, ValueError for what jsonb
    refuses (NaN or infinity, a NUL or a lone surrogate in a string or a key)
    and for a value nested deeper than ``MAX_DEPTH``.
    """
    # What comes back as it is, without the round trip (a step that returns
    # nothing, say): null, true, false, and a string jsonb can hold.
    if value is None or type(value) is bool:
        return value
    if type(value) is str:
        check_text(value, what)
        return value
    try:
        encoded = json.dumps(value, cls=encoder, allow_nan=False)
        stored = _decoder.decode(encoded)
    except ValueError as exc:  # NaN, infinity, a circular reference
        raise ValueError(f"{what} is not JSON: {exc}") from exc
    except RecursionError:
        raise _too_deep(what) from None
    for string in _strings(stored, what):
        check_text(string, what)
    return stored


def read_back(number: str) -> float | int:
    """A JSON number with a fraction or an exponent as jsonb gives it back.

    jsonb keeps numbers as ``numeric``, which prints an exponent out in
    full: ``1e+16`` comes back as ``10000000000000000``, an int (and
    ``1.2345678901234568e+18`` as another value than the float's), and
    ``numeric`` has no negative zero: ``-0.0`` comes back as ``0.0``."""
    if "e" in number.lower():
        exact = decimal.Decimal(number)
        if exact == exact.to_integral_value():
            return int(exact)
    return float(number) or 0.0


def _jsonb_object(pairs) -> dict:
    """An object as jsonb keeps it: the last of duplicate keys, the shorter
    keys first, then by their bytes."""
    return dict(sorted(dict(pairs).items(), key=_key_order))


def _key_order(pair: tuple[str, object]) -> tuple[int, bytes]:
    """Where an object's (key, value) pair goes in jsonb's order."""
    # A lone surrogate is refused after (check_text), not here.
    encoded = pair[0].encode(errors="surrogatepass")
    return len(encoded), encoded


# Made once: json.loads() would make it again for every value (every step's
# result passes here).
_decoder = json.JSONDecoder(parse_float=read_back, object_pairs_hook=_jsonb_object)


def text(value: str) -> str:
    """``value`` as a text column can hold it: a NUL and what UTF-8 cannot
    encode backslash-escaped. For text we keep rather than refuse, such as
    an error's message."""
    return value.replace("\x00", "\\x00").encode(errors="backslashreplace").decode()


def _strings(value, what: str):
    """Every string in a decoded JSON value, its keys included, read without
    recursion; a value nested deeper than ``MAX_DEPTH`` is refused."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            yield item
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise _too_deep(what)
        if isinstance(item, dict):
            yield from item
            item = item.values()
        pending.extend((child, depth + 1) for child in item)


def nested_too_deeply(value, limit: int = MAX_DEPTH) -> bool:
    """Whether a decoded JSON value is nested deeper than ``limit`` levels
    (read without recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in item)
    return False


def _too_deep(what: str) -> ValueError:
    return ValueError(
        f"{what} is nested too deeply: at most {MAX_DEPTH} levels are kept"
    )
