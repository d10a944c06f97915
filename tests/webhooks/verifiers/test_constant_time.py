"""Every signature comparison goes through ``BaseVerifier.matches()``.

A scan of the verifiers' source, so a new or edited verifier that compares a
signature with ``==`` fails here, not in a timing attack.
"""

import ast
from pathlib import Path

import pytest

import webhooks.verifiers

VERIFIERS = sorted(Path(webhooks.verifiers.__file__).parent.glob("*.py"))
# A name or attribute containing one of these holds (or derives from) a
# signature or a key; the words the verifiers use for them.
SECRET_WORDS = ("signature", "digest", "expected", "candidate", "hmac", "secret", "key")


def secret_comparisons(source: str) -> list[str]:
    """The comparisons in ``source`` that mention a signature-like name.

    The rule: a comparison (``==``, ``!=``, ``in``, ``<``... any
    ``ast.Compare``) may test parsed values against constants (a scheme name,
    a version, a count), but none of its operands may name a signature, digest,
    expected or candidate value, an HMAC, a secret or a key. Those are
    compared in constant time by ``matches()`` only, which calls
    ``hmac.compare_digest`` and is not a comparison operator. Only ``is`` and
    ``is not`` are let through: they compare identity (``is None``), and take
    the same time whatever the bytes.
    """
    flagged = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or all(
            isinstance(op, ast.Is | ast.IsNot) for op in node.ops
        ):
            continue
        names = [
            child.id if isinstance(child, ast.Name) else child.attr
            for operand in (node.left, *node.comparators)
            for child in ast.walk(operand)
            if isinstance(child, ast.Name | ast.Attribute)
        ]
        if any(word in name.lower() for name in names for word in SECRET_WORDS):
            flagged.append(f"line {node.lineno}: {ast.unparse(node)}")
    return flagged


def compare_digest_calls(source: str) -> list[int]:
    """The lines that name ``compare_digest`` (called, imported or aliased)."""
    tree = ast.parse(source)
    lines = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "compare_digest"
    ]
    lines += [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and any(alias.name == "compare_digest" for alias in node.names)
    ]
    return lines


@pytest.mark.parametrize("path", VERIFIERS, ids=lambda path: path.name)
def test_no_verifier_compares_a_signature_with_an_operator(path):
    assert secret_comparisons(path.read_text()) == []


@pytest.mark.parametrize("path", VERIFIERS, ids=lambda path: path.name)
def test_compare_digest_is_called_only_by_the_one_helper(path):
    source = path.read_text()
    found = compare_digest_calls(source)
    if path.name != "base.py":
        assert found == [], f"{path.name} calls compare_digest itself"
        return
    [matches] = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "matches"
    ]
    assert len(found) == 1
    assert matches.lineno <= found[0] <= matches.end_lineno


@pytest.mark.parametrize(
    "line",
    [
        "ok = signature == expected",
        "ok = candidate in digests",
        "ok = hmac.new(k, b, sha256).hexdigest() != sent",
        "ok = header.split('=')[1] == self.secret",
        "ok = sent not in [digest(key) for key in keys]",
        "ok = signature is None or signature == sent",
    ],
)
def test_the_scan_catches_a_signature_compared_with_an_operator(line):
    assert secret_comparisons(line)


@pytest.mark.parametrize(
    "line",
    [
        "ok = scheme != 'sha256'",
        "ok = version == 'v1'",
        "ok = len(timestamps) != 1",
        "ok = self.options['ENCODING'] == 'base64'",
        "ok = decode_secret(secret) is None",
    ],
)
def test_the_scan_lets_constants_and_counts_be_compared(line):
    assert secret_comparisons(line) == []


def test_the_scan_sees_compare_digest_however_it_is_imported():
    assert compare_digest_calls("from hmac import compare_digest as same")
    assert compare_digest_calls("import hmac\nhmac.compare_digest(a, b)")
    assert compare_digest_calls("from secrets import compare_digest")
