"""The documentation of every problem type, as the API serves it.

The source is ``problem_types.md`` beside this module (the same page the
repository's docs link to): ``# Group`` headings, then one ``## <name>``
section per problem type. Only that small subset of Markdown is read.
"""

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

SOURCE = Path(__file__).with_name("problem_types.md")
_CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class ProblemType:
    name: str
    group: str
    text: str

    @property
    def html(self) -> SafeString:
        return paragraphs(self.text)


@dataclass(frozen=True)
class ProblemTypes:
    title: str
    introduction: str
    types: dict[str, ProblemType]

    @property
    def introduction_html(self) -> SafeString:
        return paragraphs(self.introduction)


@cache
def problem_types() -> ProblemTypes:
    """Every documented problem type, read once from the page."""
    title, group, name = "", "", ""
    introduction: list[str] = []
    sections: dict[str, list[str]] = {}
    groups: dict[str, str] = {}
    for line in SOURCE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            sections[name], groups[name] = [], group
        elif line.startswith("# "):
            if not title:
                title = line[2:].strip()
            else:
                group, name = line[2:].strip(), ""
        elif name:
            sections[name].append(line)
        elif not group:
            introduction.append(line)
    return ProblemTypes(
        title=title,
        introduction="\n".join(introduction).strip(),
        types={
            name: ProblemType(name, groups[name], "\n".join(lines).strip())
            for name, lines in sections.items()
        },
    )


def paragraphs(text: str) -> SafeString:
    """Blank-line separated paragraphs with `code` spans, as escaped HTML."""
    blocks = [block.strip() for block in text.split("\n\n") if block.strip()]
    html = (_CODE.sub(r"<code>\1</code>", escape(block)) for block in blocks)
    return mark_safe("".join(f"<p>{block}</p>" for block in html))
