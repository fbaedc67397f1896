"""`--timeline FILE.svg`: live memory over the schedule's steps, stacked by category, with the
peak marked, the lower bound and the planned arena drawn, and the forward / backward boundary.

Hand-written SVG (no plotting dependency): one step-shaped polygon per category.
"""
from __future__ import annotations

from xml.sax.saxutils import escape

from memplan_cli.buffers import CATEGORIES
from memplan_cli.report.live import Timeline
from memplan_cli.report.units import human

COLORS = {
    "non-const": "#4e79a7", "trainable": "#9c755f", "back-prop": "#e15759", "gradient": "#f28e2b",
    "opt-variable": "#b07aa1", "disposable": "#76b7b2", "extra": "#59a14f",
}
W, H = 960, 480
LEFT, RIGHT, TOP, BOTTOM = 88, 140, 48, 56


def _nice_step(top: float, ticks: int = 5) -> float:
    raw = top / ticks
    unit = 1024 ** max(0, min(4, (len(str(int(raw))) - 1) // 3)) if raw >= 1 else 1
    for base in (1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000):
        if base * unit >= raw:
            return base * unit
    return raw


def _boxed_text(x: float, y: float, text: str, anchor: str, *, bold: bool = False) -> list[str]:
    """A label on a white box, so it stays readable over the stacked areas. The box width is an
    estimate (0.62 em per character): SVG has no text metrics, and `paint-order` halos are not
    drawn by every renderer (cairo, for one, paints the halo over the glyphs)."""
    w = 0.62 * 12 * len(text) + 8
    x0 = x - 4 if anchor == "start" else x - w + 4
    weight = ' font-weight="bold"' if bold else ""
    return [f'<rect x="{x0:.1f}" y="{y - 13:.1f}" width="{w:.1f}" height="17" fill="white" fill-opacity="0.85"/>',
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{weight}>{escape(text)}</text>']


def render_svg(tl: Timeline, *, title: str, lower_bound: int, planned: int, peak_label: str = "",
               forward_end: int = -1) -> str:
    n = max(1, tl.num_steps)
    top_value = max(max(tl.total) if tl.num_steps else 0, lower_bound, planned, 1)
    step = _nice_step(top_value * 1.05)
    ymax = step * (int(top_value * 1.05 // step) + 1)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + pw * t / n

    def y(v: float) -> float:
        return TOP + ph * (1 - v / ymax)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{escape(title)}</text>']
    # grid and y labels
    v = 0.0
    while v <= ymax + 1e-9:
        yy = y(v)
        out.append(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{LEFT + pw}" y2="{yy:.1f}" stroke="#e6e6e6"/>')
        out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#444">{escape(human(int(v)))}</text>')
        v += step
    # stacked areas: one step-shaped polygon per category
    bottom = [0] * tl.num_steps
    for k, c in enumerate(CATEGORIES):
        row = [int(b) for b in tl.live[k]]
        if not any(row):
            continue
        topv = [b + r for b, r in zip(bottom, row)]
        pts = []
        for t, val in enumerate(topv):
            pts += [(x(t), y(val)), (x(t + 1), y(val))]
        for t in range(tl.num_steps - 1, -1, -1):
            pts += [(x(t + 1), y(bottom[t])), (x(t), y(bottom[t]))]
        d = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
        out.append(f'<polygon points="{d}" fill="{COLORS[c]}" fill-opacity="0.85" stroke="none">'
                   f'<title>{escape(c)}</title></polygon>')
        bottom = topv
    # forward / backward boundary
    if 0 <= forward_end < n - 1:
        fx = x(forward_end + 1)
        out.append(f'<line x1="{fx:.1f}" y1="{TOP}" x2="{fx:.1f}" y2="{TOP + ph}" stroke="#888" stroke-dasharray="2,3"/>')
        out.append(f'<text x="{fx - 4:.1f}" y="{TOP + 14}" text-anchor="end" fill="#666">forward</text>')
        out.append(f'<text x="{fx + 4:.1f}" y="{TOP + 14}" fill="#666">backward</text>')
    # planned arena and lower bound: lines across the plot, named in the legend (labels inside
    # the plot collide with the peak label, which is usually near the top right)
    lines = ((planned, "planned", 'stroke="#222" stroke-width="1.5"'),
             (lower_bound, "lower bound", 'stroke="#d62728" stroke-width="1.5" stroke-dasharray="6,4"'))
    for value, _, style in lines:
        yy = y(value)
        out.append(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{LEFT + pw}" y2="{yy:.1f}" {style}/>')
    # peak marker
    if tl.num_steps:
        p = tl.peak_step
        px, py = x(p + 0.5), y(tl.peak_bytes)
        out.append(f'<line x1="{px:.1f}" y1="{py:.1f}" x2="{px:.1f}" y2="{TOP + ph}" stroke="#000" stroke-dasharray="1,2"/>')
        out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="#000"/>')
        anchor = "start" if p < n * 0.6 else "end"
        dx = 8 if anchor == "start" else -8
        text = f"peak {human(tl.peak_bytes)} at step {p}" + (f" ({peak_label})" if peak_label else "")
        out += _boxed_text(px + dx, max(TOP + 12, py - 10), text, anchor, bold=True)
    # axes
    out.append(f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}" stroke="#000"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="#000"/>')
    ticks = max(1, n // 10)
    for t in range(0, n + 1, ticks):
        out.append(f'<text x="{x(t):.1f}" y="{TOP + ph + 16}" text-anchor="middle" fill="#444">{t}</text>')
    out.append(f'<text x="{LEFT + pw / 2:.1f}" y="{H - 14}" text-anchor="middle">step of the training schedule</text>')
    out.append(f'<text x="18" y="{TOP + ph / 2:.1f}" text-anchor="middle" transform="rotate(-90 18 {TOP + ph / 2:.1f})">'
               f'live bytes</text>')
    # legend (categories present, in stacking order, top first)
    ly = TOP + 10
    for c in reversed(CATEGORIES):
        k = CATEGORIES.index(c)
        if not any(tl.live[k]):
            continue
        out.append(f'<rect x="{LEFT + pw + 8}" y="{ly - 10}" width="12" height="12" fill="{COLORS[c]}"/>')
        out.append(f'<text x="{LEFT + pw + 26}" y="{ly}">{escape(c)}</text>')
        ly += 18
    ly += 6
    for value, label, style in lines:
        out.append(f'<line x1="{LEFT + pw + 8}" y1="{ly - 4}" x2="{LEFT + pw + 20}" y2="{ly - 4}" {style}/>')
        out.append(f'<text x="{LEFT + pw + 26}" y="{ly}">{escape(label)}</text>')
        out.append(f'<text x="{LEFT + pw + 26}" y="{ly + 14}" fill="#444">{escape(human(value))}</text>')
        ly += 34
    out.append("</svg>")
    return "\n".join(out) + "\n"
