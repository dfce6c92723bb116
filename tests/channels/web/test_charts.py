from __future__ import annotations

import re

from channels.web.charts import bars


def test_bars_scale_to_the_largest_and_draw_negatives_below_the_axis() -> None:
    svg = bars([("2026-11-26", 4), ("2026-11-27", -2), ("2026-11-28", 0)], title="Facts")
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([\d.]+)"', svg)]
    assert heights == [80.0, 40.0, 0.0]  # half the height each way: 4 is the largest
    assert svg.count('class="minus"') == 1


def test_labels_and_titles_are_text_never_markup() -> None:
    svg = bars([("<script>alert(1)</script>", 1)], title='"><img src=x onerror=alert(1)>')
    assert "<script>" not in svg and "<img" not in svg
    assert "&lt;script&gt;" in svg


def test_no_points_draws_an_empty_chart() -> None:
    svg = bars([], title="Tokens")
    assert "<rect" not in svg and "Tokens" in svg
