"""Charts drawn on the server as SVG shapes (no script, no inline style: the CSP allows neither):
bars of a series of values, each with the label its tooltip shows. Pure."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH, HEIGHT = 600.0, 120.0


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    bars: list[Bar]
    peak: float  # the value the chart's full height stands for
    unit: str


def bar_chart(title: str, values: list[tuple[str, float]], unit: str = "") -> Chart:
    """One bar per (label, value), left to right, scaled to the largest value."""
    peak = max((value for _, value in values), default=0.0) or 1.0
    step = WIDTH / max(len(values), 1)
    bars = []
    for n, (label, value) in enumerate(values):
        height = round(HEIGHT * value / peak, 1)
        shown = f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.2f}"
        bars.append(
            Bar(
                round(n * step, 1),
                round(HEIGHT - height, 1),
                round(step * 0.8, 1),
                height,
                f"{label}: {shown} {unit}".rstrip(),
            )
        )
    return Chart(title, bars, peak, unit)
