"""Charts of a knowledge base's quality over time: server-rendered SVG, one line per search mode.

Why SVG from the server rather than a charting library: the admin loads nothing from a CDN, a
vendored library would be the admin's only JavaScript bundle, and a line over a few dozen runs
needs none. The lines and text take their colours from the admin's CSS variables
(`_styles.html`), so they follow its light and dark themes; modes differ by dash pattern and
marker too, so a chart still reads without colour. Every point carries a `<title>` (the run,
its index version and set version, the value) and links to its run's page. Dates and numbers are
written as the page's language writes them ("2026年5月3日" on a Chinese page, `DATE_FORMAT`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from django.template.defaultfilters import floatformat
from django.utils import timezone
from django.utils.formats import date_format, number_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, ngettext

from console.words import search_mode
from evaluation.selectors import Point

WIDTH, HEIGHT = 460, 180  # two side by side on the admin's content area
LEFT, RIGHT, TOP, BOTTOM = 40, 12, 12, 26
TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
# Each mode's look: the CSS class that colours it, its dash pattern, its marker's radius.
MODES = {
    "hybrid": ("canon-chart-hybrid", "", 4.5),
    "keyword": ("canon-chart-keyword", "6 3", 3.5),
    "vector": ("canon-chart-vector", "2 3", 3.5),
}


def _x(index: int, count: int) -> float:
    inner = WIDTH - LEFT - RIGHT
    return LEFT + (inner / 2 if count == 1 else inner * index / (count - 1))


def _y(value: float) -> float:
    inner = HEIGHT - TOP - BOTTOM
    return TOP + inner * (1 - max(0.0, min(1.0, value)))


def _day(when: datetime) -> str:
    """The day of a run, in the page's language (in the admin's time zone, as its times are)."""
    return date_format(timezone.localtime(when) if timezone.is_aware(when) else when)


def line_chart(
    *,
    metric: str,
    series: Mapping[str, Sequence[Point]],
    run_url: Callable[[int], str],
) -> SafeString:
    """An SVG line chart of `metric` (0-1) per mode over runs, oldest on the left. Points of one
    run share its place on the x axis whatever the mode."""
    runs = sorted({(p.when, p.run_id) for points in series.values() for p in points})
    place = {run_id: n for n, (_, run_id) in enumerate(runs)}
    grid = format_html_join(
        "",
        '<line class="canon-chart-grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
        '<text class="canon-chart-tick" x="{}" y="{}" text-anchor="end">{}</text>',
        (
            (
                LEFT,
                WIDTH - RIGHT,
                f"{_y(t):.1f}",
                f"{_y(t):.1f}",
                LEFT - 6,
                f"{_y(t) + 4:.1f}",
                floatformat(t, 2),
            )
            for t in TICKS
        ),
    )
    lines = []
    for mode, points in series.items():
        css, dash, radius = MODES.get(mode, ("canon-chart-other", "", 3.0))
        xy = [(f"{_x(place[p.run_id], len(runs)):.1f}", f"{_y(p.value):.1f}", p) for p in points]
        path = " ".join(f"{x},{y}" for x, y, _ in xy)
        lines.append(
            format_html(
                '<g class="canon-chart-line {}" data-mode="{}">'
                '<polyline points="{}" fill="none" stroke-width="2"{}/>{}</g>',
                css,
                mode,
                path,
                mark_safe(f' stroke-dasharray="{dash}"') if dash else "",  # noqa: S308 (constant)
                format_html_join(
                    "",
                    '<a href="{}"><circle cx="{}" cy="{}" r="{}"><title>{}</title></circle></a>',
                    (
                        (
                            run_url(p.run_id),
                            x,
                            y,
                            radius,
                            gettext("%(mode)s, run %(run)s (%(label)s): %(metric)s %(value)s")
                            % {
                                "mode": search_mode(mode),
                                "run": p.run_id,
                                "label": p.label,
                                "metric": metric,
                                # rounded, in the language's digits (as the run table's)
                                "value": floatformat(p.value, 3),
                            },
                        )
                        for x, y, p in xy
                    ),
                ),
            )
        )
    first, last = (runs[0][0], runs[-1][0]) if runs else (None, None)
    axis = format_html(
        '<text class="canon-chart-tick" x="{}" y="{}">{}</text>'
        '<text class="canon-chart-tick" x="{}" y="{}" text-anchor="end">{}</text>',
        LEFT,
        HEIGHT - 8,
        _day(first) if first else "",
        WIDTH - RIGHT,
        HEIGHT - 8,
        (
            ngettext("%(date)s (%(n)s run)", "%(date)s (%(n)s runs)", len(runs))
            % {"date": _day(last), "n": number_format(len(runs), force_grouping=True)}
        )
        if last
        else "",
    )
    return format_html(
        '<svg class="canon-chart" role="img" viewBox="0 0 {} {}" width="{}" height="{}" '
        'aria-label="{}">{}{}{}</svg>',
        WIDTH,
        HEIGHT,
        WIDTH,
        HEIGHT,
        gettext("%(metric)s per run and mode") % {"metric": metric},
        grid,
        mark_safe("".join(lines)),  # noqa: S308 (each built by format_html)
        axis,
    )


def legend(modes: Sequence[str]) -> SafeString:
    """The modes' line styles, as small SVG samples with their names."""
    return format_html_join(
        " ",
        '<span class="canon-chart-key"><svg width="28" height="10" aria-hidden="true">'
        '<g class="canon-chart-line {}"><line x1="0" x2="28" y1="5" y2="5" stroke-width="2"{}/>'
        "</g></svg> {}</span>",
        (
            (
                MODES.get(mode, ("canon-chart-other", "", 3.0))[0],
                mark_safe(f' stroke-dasharray="{MODES[mode][1]}"')  # noqa: S308 (constant)
                if mode in MODES and MODES[mode][1]
                else "",
                search_mode(mode),
            )
            for mode in modes
        ),
    )
