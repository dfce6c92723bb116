"""Charts drawn on the server as inline SVG (no script): bars per day, or per anything."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from channels.web.render import render

WIDTH, HEIGHT, GAP = 600, 160, 2


@dataclass(frozen=True)
class Bar:
    label: str  # shown on hover (a <title>) and under the first and last bar
    value: float
    x: float
    y: float
    width: float
    height: float
    negative: bool  # drawn below the axis (facts removed)


def bars(points: Sequence[tuple[str, float]], *, title: str, unit: str = "") -> Markup:
    """One bar per point, scaled to the largest; negative values below a middle axis. Labels
    and the title are escaped by the template like any text."""
    signed = any(value < 0 for _, value in points)
    axis = HEIGHT / 2 if signed else HEIGHT
    largest = max((abs(value) for _, value in points), default=0.0) or 1.0
    width = WIDTH / max(len(points), 1)
    drawn = []
    for i, (label, value) in enumerate(points):
        height = abs(value) / largest * axis
        y = axis if value < 0 else axis - height
        drawn.append(Bar(label, value, i * width, y, max(width - GAP, 1), height, value < 0))
    svg = render(
        "chart.svg.j2", bars=drawn, title=title, unit=unit, width=WIDTH, height=HEIGHT, axis=axis
    )
    return Markup(svg)
