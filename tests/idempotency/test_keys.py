import pytest
from hypothesis import given
from hypothesis import strategies as st

from idempotency import keys
from idempotency.exceptions import KeyMalformed


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("abc", "abc"),
        ("  abc\t", "abc"),
        ('"abc"', "abc"),
        ('"a\\"b"', 'a"b'),
        ('"a\\\\b"', "a\\b"),
        (
            "8e03978e-40d5-43e8-bc93-6894a57f9324",
            "8e03978e-40d5-43e8-bc93-6894a57f9324",
        ),
        ("~" * 255, "~" * 255),
        ('"a,b"', "a,b"),
    ],
)
def test_valid_keys(raw, key):
    assert keys.parse(raw) == key


def test_absent_header_is_none():
    assert keys.parse(None) is None


@pytest.mark.parametrize(
    "raw",
    [
        "",
        " ",
        '""',
        "x" * 256,
        '"' + "x" * 256 + '"',
        "a b",
        "caf\u00e9",
        "a\x00",
        "a\x7f",
        '"abc',
        '"a\\b"',
        '"a"b"',
        '"a\\"',
        "a,b",
        "a,a",
        ",",
    ],
)
def test_malformed_keys(raw):
    with pytest.raises(KeyMalformed):
        keys.parse(raw)


@given(st.text())
def test_any_text_parses_to_a_valid_key_or_raises_malformed(raw):
    try:
        key = keys.parse(raw)
    except KeyMalformed:
        return
    assert 1 <= len(key) <= 255
    assert all(0x21 <= ord(char) <= 0x7E for char in key)


@pytest.mark.parametrize(
    "raw",
    ['"abc";p=1', '"abc"; p=1;q', '"abc";a=?1;b=tok;c="s, t";d=:YQ==:;e=-1.5'],
)
def test_a_quoted_keys_parameters_are_ignored(raw):
    assert keys.parse(raw) == "abc"


@pytest.mark.parametrize(
    "raw", ['"abc";P=1', '"abc";p=', '"abc" ;p=1', '"abc";p=1, "def"', '"abc"x']
)
def test_what_follows_a_quoted_key_must_be_parameters(raw):
    with pytest.raises(KeyMalformed):
        keys.parse(raw)
