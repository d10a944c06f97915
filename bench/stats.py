"""Small statistics helpers shared by the benchmarks."""

import statistics


def median_ms(samples_ns):
    return statistics.median(samples_ns) / 1e6


def p95_ms(samples_ns):
    ordered = sorted(samples_ns)
    return ordered[int(len(ordered) * 0.95) - 1] / 1e6


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
