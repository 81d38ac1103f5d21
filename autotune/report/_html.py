"""One HTML page that opens offline: plotly.js inline or beside it, system fonts, a sortable table.

The page must open offline (on a laptop, from a CI artifact, years later): nothing in it refers
to a network resource. plotly.js is embedded once in the head (``plotly.offline.get_plotlyjs``,
what ``include_plotlyjs=True`` embeds) and each figure is a ``<div>`` plus its ``newPlot`` call.
Pages written night after night into one folder share one ``plotly.min.js`` beside them instead
(:func:`write_plotly_js`; 4.8 MB once, not per night), referred to by a relative path.
"""

from __future__ import annotations

import contextlib
import html
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "PLOTLY_JS",
    "Cell",
    "Section",
    "esc",
    "figure_html",
    "page",
    "table_html",
    "write_html",
    "write_plotly_js",
]

# Plotly's mode bar without the links to plotly's site; images are saved from the page itself.
_PLOT_CONFIG: dict[str, Any] = {"displaylogo": False, "responsive": True}

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
 margin:0 auto;max-width:1400px;padding:1rem 1.5rem;color:#1f2328;background:#fff}
h1{font-size:1.5rem;margin:.2rem 0}h2{font-size:1.2rem;border-bottom:1px solid #d0d7de;
 padding-bottom:.2rem;margin-top:2rem}h3{font-size:1rem}
nav a{margin-right:1rem}p.note{color:#59636e;margin:.3rem 0}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #d0d7de;padding:.25rem .45rem;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th{background:#f6f8fa;position:sticky;top:0}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th[aria-sort=ascending]::after{content:" \\25B2"}
table.sortable th[aria-sort=descending]::after{content:" \\25BC"}
table.facts th{position:static;width:14rem}
.wide{overflow-x:auto;max-height:80vh}
tr.baseline td{background:#f3f8ff}tr.best td{background:#eefbf1}
.ok{color:#1a7f37}.failed{color:#cf222e}.infeasible{color:#9a6700}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85rem}
pre{background:#f6f8fa;padding:.6rem;white-space:pre-wrap;word-break:break-all}
td.evidence{min-width:28rem}
"""

# Sort on a header click: numbers by their data-v value, text otherwise; empty cells always last.
_SORT_JS = """
(function(){
function key(td){if(!td)return null;var v=td.getAttribute('data-v');
 if(v!==null&&v!==''){var f=parseFloat(v);return isNaN(f)?v:f;}
 var t=td.textContent.trim();return (t===''||t==='-')?null:t;}
function sortBy(table,i,th){var asc=th.getAttribute('aria-sort')!=='ascending';
 table.querySelectorAll('th').forEach(function(h){h.removeAttribute('aria-sort');});
 th.setAttribute('aria-sort',asc?'ascending':'descending');
 var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
 rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]);
  if(x===null&&y===null)return 0;if(x===null)return 1;if(y===null)return -1;
  var c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y),undefined,{numeric:true});
  return asc?c:-c;});
 rows.forEach(function(r){body.appendChild(r);});}
document.querySelectorAll('table.sortable').forEach(function(table){
 table.querySelectorAll('thead th').forEach(function(th,i){
  th.addEventListener('click',function(){sortBy(table,i,th);});});});
})();
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class Cell:
    """A table cell: its text and, for numbers, the value it sorts by."""

    text: str
    sort: float | None = None
    css: str = ""
    title: str = ""
    href: str = ""  # a relative link (another file next to this one); never a network address

    @classmethod
    def num(cls, value: float | int | None, fmt: str = "{:.1f}") -> Cell:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return cls("-", css="n")
        return cls(fmt.format(value), sort=float(value), css="n")


@dataclass(frozen=True)
class Section:
    """A titled part of the page; ``body`` is HTML built by this module's helpers."""

    anchor: str
    title: str
    body: str


def table_html(
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell | str]],
    *,
    sortable: bool = False,
    css: str = "",
    row_classes: Sequence[str] | None = None,
    table_id: str | None = None,
) -> str:
    classes = " ".join(c for c in (("sortable" if sortable else ""), css) if c)
    id_attr = f' id="{esc(table_id)}"' if table_id else ""
    out = [f'<table{id_attr} class="{classes}">']
    out.append("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead><tbody>")
    for i, row in enumerate(rows):
        rc = row_classes[i] if row_classes else ""
        out.append(f'<tr class="{esc(rc)}">' if rc else "<tr>")
        for cell in row:
            c = cell if isinstance(cell, Cell) else Cell(str(cell))
            attrs = ""
            if c.sort is not None:
                attrs += f' data-v="{c.sort!r}"'
            if c.css:
                attrs += f' class="{esc(c.css)}"'
            if c.title:
                attrs += f' title="{esc(c.title)}"'
            text = f'<a href="{esc(c.href)}">{esc(c.text)}</a>' if c.href else esc(c.text)
            out.append(f"<td{attrs}>{text}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def figure_html(fig: go.Figure, div_id: str) -> str:
    """The figure's div and its ``Plotly.newPlot`` call (plotly.js itself is in the page head)."""
    body: str = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOT_CONFIG)
    return f'<div class="plot">{body}</div>'


PLOTLY_JS = "plotly.min.js"


def write_plotly_js(folder: Path) -> Path:
    """plotly.js as one file in ``folder`` (:data:`PLOTLY_JS`), for the pages written beside it;
    rewritten only when the installed plotly's differs."""
    from plotly.offline import get_plotlyjs

    path = Path(folder) / PLOTLY_JS
    js = get_plotlyjs()
    try:
        if path.stat().st_size == len(js.encode()) and path.read_text(encoding="utf-8") == js:
            return path
    except OSError:
        pass
    return write_html(js, path)


def page(
    title: str, subtitle: str, sections: Sequence[Section], *, plots: bool, plotly_src: str | None = None
) -> str:
    """The whole document; plotly.js only when some section draws a plot: embedded, or from
    ``plotly_src`` (a relative path to :func:`write_plotly_js`'s file)."""
    head_js = ""
    if plots and plotly_src is not None:
        head_js = f'<script type="text/javascript" src="{esc(plotly_src)}"></script>'
    elif plots:
        from plotly.offline import get_plotlyjs

        head_js = f'<script type="text/javascript">{get_plotlyjs()}</script>'
    nav = " ".join(f'<a href="#{esc(s.anchor)}">{esc(s.title)}</a>' for s in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{_CSS}</style>{head_js}</head><body>",
        f"<h1>{esc(title)}</h1><p class='note'>{esc(subtitle)}</p><nav>{nav}</nav>",
    ]
    for s in sections:
        parts.append(f'<section id="{esc(s.anchor)}"><h2>{esc(s.title)}</h2>{s.body}</section>')
    parts.append(f"<script>{_SORT_JS}</script></body></html>")
    return "\n".join(parts)


def write_html(text: str, path: Path) -> Path:
    """Write atomically: a reader never sees half a report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path
