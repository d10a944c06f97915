"""Configured sources: WEBHOOKS["SOURCES"] entries resolved to verifiers."""

from dataclasses import dataclass

from django.utils.module_loading import import_string

from .conf import SOURCE_DEFAULTS, VERIFIERS, webhooks_settings
from .verifiers.base import BaseVerifier

# Never stored, whatever a source's allow-list says.
NEVER_STORED = frozenset({"cookie", "authorization", "proxy-authorization"})


@dataclass(frozen=True)
class Source:
    name: str
    verifier: BaseVerifier
    max_body_size: int
    stored_headers: tuple[str, ...]

    def filter_headers(self, headers) -> dict:
        """The allow-listed headers present in the request, by canonical name."""
        return {name: headers[name] for name in self.stored_headers if name in headers}


def verifier_class(value) -> type[BaseVerifier]:
    """Resolve a short name or dotted path; raise ImportError or TypeError."""
    cls = (
        import_string(VERIFIERS.get(value, value)) if isinstance(value, str) else value
    )
    if not (isinstance(cls, type) and issubclass(cls, BaseVerifier)):
        raise TypeError(f"{value!r} is not a BaseVerifier subclass")
    return cls


def build(name: str, config: dict) -> Source:
    config = {**SOURCE_DEFAULTS, **config}
    verifier = verifier_class(config["VERIFIER"])(
        secrets=config["SECRETS"],
        tolerance=config["TOLERANCE"],
        options=config["OPTIONS"],
    )
    never = NEVER_STORED | {h.lower() for h in verifier.signature_headers}
    wanted = [*config["HEADERS"], *verifier.headers]
    stored = tuple(dict.fromkeys(h for h in wanted if h.lower() not in never))
    return Source(
        name=name,
        verifier=verifier,
        max_body_size=config["MAX_BODY_SIZE"],
        stored_headers=stored,
    )


def get(name: str) -> Source | None:
    """The configured source called ``name``, or None."""
    # Built per request: cheap, and never stale under override_settings.
    config = webhooks_settings.SOURCES.get(name)
    return None if config is None else build(name, config)
