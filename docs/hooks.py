"""mkdocs hooks: files written for elsewhere, as the site includes them.

The site includes two files with pymdownx.snippets, and adapts them once the
snippet is in, before mkdocs resolves (and, with --strict, validates) links:

- CHANGELOG.md sits at the repository's root and links to the reference
  pages as ``docs/<page>.md``, right on GitHub; in docs/changelog.md those
  pages are siblings, so the links lose their ``docs/``.
- idempotency/shared/problem_types.md (the page the API serves) starts each
  section with its status, "400. The view ...", which Markdown would read as
  a numbered list; the period is escaped.
"""

import re

from markdown import Extension, Markdown
from markdown.preprocessors import Preprocessor

ROOT_LINK = re.compile(r"\]\(docs/")
STATUS_LEAD = re.compile(r"^(\d{3})\. ")


def adapt(line: str) -> str:
    line = ROOT_LINK.sub("](", line)
    return STATUS_LEAD.sub(r"\1\\. ", line)


class _Adapt(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        return [adapt(line) for line in lines]


class IncludedFiles(Extension):
    def extendMarkdown(self, md: Markdown) -> None:
        # Snippets includes files at priority 32; run right after it.
        md.preprocessors.register(_Adapt(md), "included_files", 31)


def on_config(config):
    config.markdown_extensions.append(IncludedFiles())
    return config
