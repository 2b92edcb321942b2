"""The scaffold every page of the reports shares: plotly.js embedded (a page opens
offline), the style, the title, and a render check.

The render check, at the end of a page, writes what the browser drew (bars per trace)
and any script error into a hidden ``<pre id="render-check">`` so that a headless
browser, or a person filing a bug, can see whether the page rendered
(:func:`render_check_json` reads it back).
"""
from __future__ import annotations

import html
import json

from plotly.offline import get_plotlyjs

from ipusim.report import sortable_table

#: How every page's plots are drawn: no plotly logo, resized with the window.
PLOT_CONFIG = {"displaylogo": False, "responsive": True}

#: The style every page shares (a page adds its own after it).
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 2rem 2rem;
       color: #222; background: #fafafa; }
h1 { font-size: 1.5rem; margin: 1.2rem 0 0.2rem; }
h2 { font-size: 1.15rem; margin: 1.6rem 0 0.5rem; }
.sub { color: #555; margin: 0 0 1rem; }
.verdict { border-left: 6px solid #d62728; background: white; padding: 0.8rem 1.2rem;
           box-shadow: 0 1px 3px rgba(0,0,0,0.12); }
.verdict.compute { border-left-color: #2ca02c; }
.badge { display: inline-block; font-weight: 600; font-size: 0.8rem; padding: 0.1rem 0.5rem;
         border-radius: 0.6rem; background: #eee; margin-right: 0.5rem; }
.verdict ul { margin: 0.5rem 0 0; padding-left: 1.2rem; }
details { margin-top: 0.4rem; color: #555; font-size: 0.9rem; }
table.figures { border-collapse: collapse; background: white;
                box-shadow: 0 1px 3px rgba(0,0,0,0.12); }
table.figures td, table.figures th { padding: 0.2rem 0.9rem; border-bottom: 1px solid #eee;
                                     text-align: left; }
table.figures td.value { text-align: right; font-variant-numeric: tabular-nums; }
.figure { background: white; margin-top: 1rem; box-shadow: 0 1px 3px rgba(0,0,0,0.12); }
.top { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 1.5rem; }
table.figures { width: 100%; }
.row { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 1rem; }
footer { color: #777; font-size: 0.85rem; margin-top: 2rem; }
""" + sortable_table.STYLE

# Records script errors from the start of the page, before plotly.js loads.
ERROR_HOOK = """window.__ipusimErrors = [];
window.addEventListener("error", function (e) {
  window.__ipusimErrors.push(String(e.message || e.error || e));
});"""

# Once every figure has drawn, count the bars of each bar trace as the browser drew them.
RENDER_CHECK = """(function () {
  function check(attempt) {
    var plots = Array.prototype.slice.call(document.querySelectorAll(".js-plotly-plot"));
    var ready = plots.length > 0 && plots.every(function (gd) { return gd._fullLayout; });
    if (!ready && attempt < 100) { setTimeout(function () { check(attempt + 1); }, 50); return; }
    var result = {errors: window.__ipusimErrors, figures: {}};
    plots.forEach(function (gd) {
      var bars = (gd._fullData || []).filter(function (t) { return t.type === "bar"; });
      var groups = gd.querySelectorAll(".barlayer .trace");
      var counts = {};
      bars.forEach(function (trace, i) {
        var drawn = groups[i] ? groups[i].querySelectorAll(".point").length : 0;
        counts[trace.name] = (counts[trace.name] || 0) + drawn;  // a kind's traces add up
      });
      result.figures[gd.id] = {bars: counts, traces: (gd.data || []).length};
    });
    var out = document.getElementById("render-check");
    out.textContent = JSON.stringify(result);
    out.setAttribute("data-status", "done");
  }
  window.addEventListener("load", function () { setTimeout(function () { check(0); }, 0); });
})();"""


def page(title: str, subtitle: str, body: str, plots: bool = True, style: str = "") -> str:
    """A whole report page: plotly.js embedded (it opens offline), the style (and the
    page's own ``style`` after it), the title and ``body``, and the check a browser
    test reads once the plots drew; ``plots=False``: a page of text and tables,
    without plotly.js or the check."""
    plotly_js = f'<script type="text/javascript">{get_plotlyjs()}</script>' if plots else ""
    check = (f'<pre id="render-check" hidden data-status="pending"></pre>\n'
             f"<script>{RENDER_CHECK}</script>") if plots else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ipusim report — {html.escape(title)}</title>
<style>{STYLE}{style}</style>
<script>{ERROR_HOOK}</script>
{plotly_js}
</head>
<body>
<h1>ipusim report — {html.escape(title)}</h1>
<p class="sub">{html.escape(subtitle)}</p>
{body}
{check}
</body>
</html>
"""


def render_check_json(dom: str) -> dict:
    """The render check's result from a page's DOM as a browser dumped it."""
    start = dom.find('id="render-check"')
    if start < 0:
        raise ValueError("the page has no render check (<pre id=\"render-check\">)")
    body_start = dom.index(">", start) + 1
    text = html.unescape(dom[body_start:dom.index("</pre>", body_start)])
    if not text:
        raise ValueError("the render check did not run: the page's scripts did not finish")
    return json.loads(text)
