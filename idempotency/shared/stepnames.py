"""What telemetry names a durable step by: its family, few enough for a
metric label or a span name."""

# A compensation's recovery point is a step named "undo:<name>".
UNDO_PREFIX = "undo:"


def family(name: str) -> str:
    """The step's name up to its first ":" (an undo keeps its "undo:"): a
    loop's calls are named per item (``f"charge:{item.pk}"``), and an id in a
    label or a span name would make one per item."""
    prefix = UNDO_PREFIX if name.startswith(UNDO_PREFIX) else ""
    return prefix + name.removeprefix(prefix).partition(":")[0]
