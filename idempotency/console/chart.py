"""The dashboard's chart: hourly counts laid out as an SVG line chart."""

from datetime import datetime, timedelta

CHART_HOURS = 24
COLOURS = ("#2b6cb0", "#2f855a", "#b7791f", "#c53030")


def hourly_chart(now: datetime, series) -> dict:
    """Lay out the last 24 hours of each ``(label, counts(since))`` series."""
    hours = [
        (now - timedelta(hours=offset)).replace(minute=0, second=0, microsecond=0)
        for offset in range(CHART_HOURS - 1, -1, -1)
    ]
    lines = []
    for label, counts in series:
        by_hour = counts(hours[0])
        lines.append((label, [by_hour.get(hour, 0) for hour in hours]))
    return svg_chart(hours, lines)


def svg_chart(hours, lines, width=720, height=200, pad=32) -> dict:
    """Lay out an SVG line chart; the template only draws what this returns."""
    peak = max([1] + [max(values) for _, values in lines if values])
    step = (width - 2 * pad) / max(1, len(hours) - 1)

    def point(index, value):
        x = pad + index * step
        y = height - pad - (value / peak) * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    series = [
        {
            "label": label,
            "colour": COLOURS[i % len(COLOURS)],
            "points": " ".join(point(j, v) for j, v in enumerate(values)),
            "total": sum(values),
        }
        for i, (label, values) in enumerate(lines)
    ]
    ticks = [
        {"x": f"{pad + i * step:.1f}", "label": hour.strftime("%H:00")}
        for i, hour in enumerate(hours)
        if i % 4 == 0
    ]
    return {
        "width": width,
        "height": height,
        "pad": pad,
        "peak": peak,
        "series": series,
        "ticks": ticks,
        "baseline": height - pad,
        "right": width - pad,
    }
