"""A line chart as SVG, without a plotting library (the venv holds torch and numpy only)."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


@dataclass(frozen=True)
class Line:
    label: str
    points: list[tuple[float, float]]
    group: str  # lines of one group share a colour and one legend entry


def plot(path: Path, title: str, x_label: str, y_label: str, lines: list[Line], groups: list[str]) -> None:
    width, height, left, right, top, bottom = 760, 440, 70, 170, 40, 50
    xs = [x for line in lines for x, _ in line.points]
    ys = [y for line in lines for _, y in line.points]
    if not xs:
        raise ValueError(f"{path}: nothing to plot")
    x0, x1 = 0.0, max(xs)
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.05 or 0.1
    y0, y1 = y0 - pad, y1 + pad

    def sx(x: float) -> float:
        return left + (x - x0) / ((x1 - x0) or 1) * (width - left - right)

    def sy(y: float) -> float:
        return top + (y1 - y) / (y1 - y0) * (height - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
        f'<text x="{(left + width - right) / 2}" y="{height - 12}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(top + height - bottom) / 2})">{escape(y_label)}</text>',
    ]
    for i in range(5):
        xv, yv = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        parts.append(f'<text x="{sx(xv):.1f}" y="{height - bottom + 16}" text-anchor="middle">{xv:,.0f}</text>')
        parts.append(f'<text x="{left - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:.3f}</text>')
        parts.append(f'<line x1="{left}" y1="{sy(yv):.1f}" x2="{width - right}" y2="{sy(yv):.1f}" stroke="#eee"/>')
    for line in lines:
        colour = COLOURS[groups.index(line.group) % len(COLOURS)]
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line.points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.3" stroke-opacity="0.8" points="{d}">'
                     f"<title>{escape(line.label)}</title></polyline>")  # fmt: skip
    for i, group in enumerate(groups):
        y = top + 10 + i * 20
        colour = COLOURS[i % len(COLOURS)]
        parts.append(f'<line x1="{width - right + 10}" y1="{y}" x2="{width - right + 35}" y2="{y}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{width - right + 40}" y="{y + 4}">{escape(group)}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")
