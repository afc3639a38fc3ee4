"""Column charts drawn on the server as SVG: nothing to load, nothing from the internet.

A chart is a list of columns (one per time slot), each with a value per
part (stacked: succeeded, failed, ...). The SVG stretches to its box's width
(`preserveAspectRatio="none"`), so it fits a phone and a laptop alike; its
text (the scale, the times) is HTML around it, which does not stretch. Each
column is a group with a <title>, so hovering shows its numbers, and carries
its values as data attributes; the page also gives the same numbers as a
table for screen readers.
"""

import math
from dataclasses import dataclass, field

from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

WIDTH = 10  # SVG units per column
HEIGHT = 100


@dataclass
class Column:
    key: str  # the slot's start, ISO 8601
    label: str  # the slot's time as people read it
    values: dict  # part -> number, or None when nothing was measured


@dataclass
class Chart:
    name: str  # an id fragment: finished, depth, latency, running
    title: str
    parts: list  # [(part, label)], bottom to top
    columns: list = field(default_factory=list)
    fmt: object = str  # number -> text, for titles and the table

    @property
    def top(self):
        """The scale's top: the highest column, rounded up to 1, 2 or 5 times a power of ten."""
        highest = max((sum(v or 0 for v in c.values.values()) for c in self.columns), default=0)
        return nice_ceiling(highest)

    @property
    def top_text(self):
        return self.fmt(self.top)

    @property
    def empty(self):
        return all(v is None for c in self.columns for v in c.values.values())

    def svg(self):
        top = self.top
        groups = []
        for i, column in enumerate(self.columns):
            x = i * WIDTH
            rects, base = [], HEIGHT
            for part, _label in self.parts:
                value = column.values.get(part) or 0
                height = HEIGHT * value / top if top else 0
                if height > 0:
                    base -= height
                    rects.append(format_html(
                        '<rect class="part-{}" x="{}" y="{}" width="{}" height="{}"></rect>',
                        part, x + 1, f"{base:.3f}", WIDTH - 2, f"{height:.3f}"))
            data = format_html_join(" ", 'data-{}="{}"', (
                (part, "" if column.values.get(part) is None else column.values[part])
                for part, _label in self.parts))
            # A transparent full-height rect: a quiet minute shows its zeros on hover too.
            groups.append(format_html(
                '<g class="column" data-slot="{}" {}><title>{}</title>'
                '<rect class="hit" x="{}" y="0" width="{}" height="{}"></rect>{}</g>',
                column.key, data, self.describe(column), x, WIDTH, HEIGHT, mark_safe("".join(rects))))
        grid = format_html(
            '<line class="grid" x1="0" x2="{w}" y1="0.5" y2="0.5"></line>'
            '<line class="grid" x1="0" x2="{w}" y1="50" y2="50"></line>'
            '<line class="axis" x1="0" x2="{w}" y1="{h}" y2="{h}"></line>',
            w=len(self.columns) * WIDTH, h=HEIGHT)
        return format_html(
            '<svg class="chart chart-{}" viewBox="0 0 {} {}" preserveAspectRatio="none" '
            'aria-hidden="true" focusable="false">{}{}</svg>',
            self.name, max(1, len(self.columns)) * WIDTH, HEIGHT, grid, mark_safe("".join(groups)))

    def describe(self, column):
        """"12:03 · succeeded 5, failed 1": what a column's <title> says."""
        values = ", ".join(f"{label} {self.text(column.values.get(part))}" for part, label in self.parts)
        return f"{column.label} · {values}"

    def text(self, value):
        return "—" if value is None else self.fmt(value)

    def rows(self):
        """[(label, [texts])] for the table: every column that has a value."""
        return [(c.label, [self.text(c.values.get(part)) for part, _label in self.parts])
                for c in self.columns if any(v for v in c.values.values())]


def nice_ceiling(value):
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power
