"""Small statistics helpers shared by the benchmarks."""

import math
import statistics


def median_ms(samples_ns):
    return statistics.median(samples_ns) / 1e6


def p95_ms(samples_ns):
    return percentile_ms(samples_ns, 0.95)


def percentile_ms(samples_ns, fraction):
    """The sample below which ``fraction`` of them lie (nearest rank), in ms."""
    ordered = sorted(samples_ns)
    return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)] / 1e6


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
