"""Grouped bar charts as standalone SVG files, for docs/benchmarks.md.

Plain SVG written from the figures a bench just measured: no plotting
dependency, and the file diffs as text.
"""

from html import escape
from pathlib import Path

COLOURS = ("#2b6cb0", "#2f855a", "#b7791f", "#c53030", "#6b46c1")
WIDTH = 720
HEIGHT = 300
PAD_LEFT = 64
PAD_RIGHT = 16
PAD_TOP = 40
PAD_BOTTOM = 72


def bar_chart(path, title: str, categories, series, unit: str) -> Path:
    """Write a grouped bar chart: one group per category, one bar per series.

    ``series`` is a list of ``(label, values)`` with one value per category
    (``None`` leaves a gap). Returns the path written.
    """
    values = [v for _, row in series for v in row if v is not None]
    peak = max(values, default=1) or 1
    plot_width = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_height = HEIGHT - PAD_TOP - PAD_BOTTOM
    group = plot_width / max(1, len(categories))
    bar = group * 0.8 / max(1, len(series))
    baseline = PAD_TOP + plot_height

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">'
        f"{escape(title)}</text>",
    ]
    for tick in range(5):
        value = peak * tick / 4
        y = baseline - plot_height * tick / 4
        parts.append(
            f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#ddd"/><text x="{PAD_LEFT - 6}" y="{y + 4:.1f}" '
            f'text-anchor="end">{_number(value)}</text>'
        )
    parts.append(
        f'<text x="14" y="{PAD_TOP + plot_height / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {PAD_TOP + plot_height / 2})">{escape(unit)}</text>'
    )
    for i, category in enumerate(categories):
        left = PAD_LEFT + i * group + group * 0.1
        for j, (_, row) in enumerate(series):
            value = row[i]
            if value is None:
                continue
            height = plot_height * value / peak
            parts.append(
                f'<rect x="{left + j * bar:.1f}" y="{baseline - height:.1f}" '
                f'width="{bar * 0.9:.1f}" height="{height:.1f}" '
                f'fill="{COLOURS[j % len(COLOURS)]}"><title>{escape(str(category))}: '
                f"{_number(value)} {escape(unit)}</title></rect>"
            )
        parts.append(
            f'<text x="{left + group * 0.4:.1f}" y="{baseline + 16}" '
            f'text-anchor="middle">{escape(str(category))}</text>'
        )
    for j, (label, _) in enumerate(series):
        x = PAD_LEFT + j * (plot_width / max(1, len(series)))
        y = HEIGHT - 20
        parts.append(
            f'<rect x="{x:.1f}" y="{y - 9}" width="10" height="10" '
            f'fill="{COLOURS[j % len(COLOURS)]}"/>'
            f'<text x="{x + 14:.1f}" y="{y}">{escape(label)}</text>'
        )
    parts.append("</svg>\n")
    path = Path(path)
    path.write_text("\n".join(parts))
    return path


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"
