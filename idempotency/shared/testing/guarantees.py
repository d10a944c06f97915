"""How a check reports a broken guarantee, or a case it cannot run; each kit
writes its own guarantees, one sentence each."""

import json
from collections.abc import Iterable
from numbers import Number
from typing import Any

# How much of a body a failure message shows.
EXCERPT = 160


class GuaranteeBroken(AssertionError):
    """A guarantee does not hold for the code under test; says which, and why."""

    def __init__(self, guarantee: str, evidence: Iterable[str]):
        self.guarantee = guarantee
        self.evidence = list(evidence)
        lines = [f"Guarantee broken: {guarantee}."]
        lines += [f"  {line}" for line in self.evidence]
        super().__init__("\n".join(lines))


class CannotCheck(AssertionError):
    """The check could not run against this code: its setup needs a change.

    ``precondition`` names what the case needed and did not get (``"the
    first request succeeds"``), so the message says which one is missing.
    """

    def __init__(self, case: str, problem: str, *, precondition: str = ""):
        self.case = case
        self.problem = problem
        self.precondition = precondition
        needed = f" it needs {precondition}, and" if precondition else ""
        super().__init__(f"The proof kit cannot run {case!r}:{needed} {problem}")


def measure(effects) -> Any:
    """Read ``effects()``; None (an empty table's Sum) counts as 0, in a dict
    of counts (one per effect) too."""
    value = effects()
    if isinstance(value, dict):
        counts = {name: 0 if count is None else count for name, count in value.items()}
    else:
        counts = {"": 0 if value is None else value}
    if not all(isinstance(count, Number) for count in counts.values()):
        # Rows (a QuerySet) never read equal twice: every case would blame
        # the code under test for the kit's misuse.
        raise TypeError(
            "effects() must return a number, or a dict of numbers, that grows "
            f"with the business effect; it returned {value!r}: count it, e.g. "
            "Order.objects.count()"
        )
    return counts if isinstance(value, dict) else counts[""]


def require_an_effect(case: str, before, after, *, when: str, advice: str) -> None:
    """Refuse a case whose clean run (``when``: "when the consumer consumed a
    message") left ``effects()`` where it was: every crash and redelivery
    would then pass, proving nothing. ``advice`` says what to count."""
    if after == before:
        raise CannotCheck(case, f"effects() stayed {before} {when}; {advice}")


def broken(guarantee: str, *evidence: str) -> GuaranteeBroken:
    return GuaranteeBroken(guarantee, evidence)


class Problems(list):
    """What a check finds wrong with one guarantee, appended as it reads the
    evidence; ``raise_if_any()`` ends the check.

    ``context`` (what was sent, to which endpoint) opens the report, the
    problems follow, then the closing evidence ``raise_if_any`` is given.
    """

    def __init__(self, guarantee: str, *context: str):
        super().__init__()
        self.guarantee = guarantee
        self.context = context

    def raise_if_any(self, *evidence: str) -> None:
        """Raise ``GuaranteeBroken`` when a problem was found."""
        __tracebackhide__ = True
        if self:
            raise GuaranteeBroken(self.guarantee, [*self.context, *self, *evidence])


def change(before, after, expected) -> str:
    """``effects went 0 → 2 (expected 0 → 1)``."""
    return f"effects went {before} → {after} (expected {before} → {expected})"


def once_verdict(before, after, delta) -> str | None:
    """What went wrong with an effect that had to happen once (None: nothing)."""
    if after - before == delta:
        return None
    if after == before:
        verdict = "the effect was lost"
    elif after - before == 2 * delta:
        verdict = "the effect was applied twice"
    else:
        verdict = "the effect is wrong"
    return f"{verdict}: {change(before, after, before + delta)}"


def excerpt(content: bytes | str) -> str:
    """The start of a body, on one line."""
    if isinstance(content, bytes):
        content = content.decode(errors="replace")
    text = " ".join(content.split())
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def content(response) -> bytes:
    """A response's body, a streamed one (``StreamingHttpResponse``,
    ``FileResponse``) included: it has no ``content``."""
    if not response.streaming:
        return response.content
    body = b"".join(response.streaming_content)
    # The stream can be read once: put the bytes back for the next reader.
    response.streaming_content = [body]
    return body


def answer(response) -> str:
    """``201 {"id": 1} (Idempotent-Replayed)``: what a response said."""
    replayed = response.get("Idempotent-Replayed") == "true"
    marker = "replayed" if replayed else "not replayed"
    text = f"{response.status_code} {excerpt(content(response))} ({marker}"
    if response.get("Retry-After"):
        text += f", Retry-After: {response['Retry-After']}"
    return text + ")"


def shown(value) -> str:
    """A payload or state, compactly."""
    try:
        return excerpt(json.dumps(value, sort_keys=True, default=str))
    except TypeError:
        return excerpt(repr(value))
