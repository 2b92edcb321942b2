"""The index page of a folder of reports: every autoReport directory in it, in one table.

A run of several models, or the main job's dozens of scenarios, leaves many
report directories; ``index.html`` lists each with its headline figures (the
throughput, the run's one figure as its exit line and report give it: fed by
the data loader where that is slower than the IPUs; the step time, the IPUs it
used), its verdict (the kind and its headline) and a link to its page, so that a
person opens one file and picks the report to read. A report directory is found
by its ``profile.json`` and read with :func:`~ipusim.report.autoreport.load_profile`;
the page shares the reports' style (:mod:`ipusim.report.html`) and needs no plotly.js.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from ipusim.analysis.headline import delivered_items_per_s
from ipusim.report.autoreport import HTML, PROFILE, SUMMARY, load_profile
from ipusim.report.files import write_atomically
from ipusim.report.page import page

INDEX = "index.html"

# Beside the reports' style: one table whose columns line up across the groups.
_STYLE = """
table.index th { white-space: nowrap; }
table.index tr:first-child th:last-child { width: 55%; }
table.index tr:first-child th:nth-child(n+2):nth-child(-n+4) { text-align: right; }
table.index td.verdict-line { font-size: 0.9rem; color: #333; overflow-wrap: anywhere; }
table.index tr.group th { background: #f0f0f0; font-size: 1rem; padding-top: 0.5rem; }
table.index td:first-child { white-space: nowrap; }
table.index span.fed { font-size: 0.8rem; color: #555; }
"""


@dataclass(frozen=True)
class IndexEntry:
    """One report directory as the index shows it: figures None where its profile has none
    (a model that did not fit, a profile written before the figure existed)."""

    path: PurePosixPath        # the report directory, relative to the indexed folder
    link: PurePosixPath        # its page (report.html, else summary.txt, else profile.json)
    throughput: float | None   # simulated items/s: the run's one figure (fed by the loader)
    step_time_ms: float | None
    ipus: int | None           # IPUs the model used
    verdict_kind: str          # the verdict's kind, "out_of_memory" or "unreadable"
    verdict_headline: str
    device_throughput: float | None = None  # the IPUs alone, where the loader is slower


def index_entries(folder: str | Path) -> list[IndexEntry]:
    """Every report directory under ``folder`` (any depth), in path order. A profile that
    cannot be read is listed as ``unreadable`` with the cause, not left out."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"No folder {folder} to index: expected a folder of reports "
                                "(ipusim run --report DIR writes one)")
    return [_entry(root, found.parent) for found in sorted(root.rglob(PROFILE))]


def _entry(root: Path, directory: Path) -> IndexEntry:
    relative = PurePosixPath(directory.relative_to(root).as_posix())
    page = next((name for name in (HTML, SUMMARY) if (directory / name).is_file()), PROFILE)
    try:
        profile = load_profile(directory)
    except (OSError, ValueError) as error:
        return IndexEntry(relative, relative / page, None, None, None, "unreadable", str(error))
    figures, verdict = (part if isinstance(part, dict) else {}
                        for part in (profile.get("figures"), profile.get("verdict")))
    if "out_of_memory" in profile:
        kind, headline = "out_of_memory", (str(profile["out_of_memory"]).splitlines() or [""])[0]
    else:
        kind, headline = str(verdict.get("kind", "")), str(verdict.get("headline", ""))
    try:
        numbers = [_number(figures, name) for name in ("throughput(items/s)", "step_time(ms)",
                                                       "ipus")]
    except ValueError as error:
        return IndexEntry(relative, relative / page, None, None, None, "unreadable",
                          f"{directory / PROFILE} is damaged: {error}")
    device, step_time, ipus = numbers
    loader = profile.get("loader_items_per_s")
    loader = float(loader) if isinstance(loader, (int, float)) and loader > 0 else None
    throughput = None if device is None else delivered_items_per_s(device, loader)
    return IndexEntry(relative, relative / page, throughput, step_time,
                      None if ipus is None else int(ipus), kind, headline,
                      device if throughput is not None and throughput < device else None)


def _number(figures: dict, name: str) -> float | None:
    """A figure of the profile, None where it has none (or something else in its place).
    Raises ValueError for a number that is not finite (NaN, Infinity)."""
    value = figures.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if not math.isfinite(value):
        raise ValueError(f"figures.{name} is {value}")
    return float(value)


def render_index(folder: str | Path, title: str | None = None) -> str:
    """The index page of ``folder`` as HTML; its links are relative to ``folder``, where
    the page is meant to be written."""
    entries = index_entries(folder)
    title = title or f"index of {Path(folder).resolve().name}/"
    groups: dict[PurePosixPath, list[IndexEntry]] = {}
    for entry in entries:
        groups.setdefault(entry.path.parent, []).append(entry)
    rows = "".join(_group(parent, members, headed=len(groups) > 1)
                   for parent, members in groups.items())
    count = f"{len(entries)} report{'s' if len(entries) != 1 else ''}"
    body = ('<table class="figures index"><tr><th>report</th><th>throughput<br>items/s</th>'
            f"<th>step time<br>ms</th><th>IPUs</th><th>verdict</th></tr>{rows}</table>"
            if entries else "<p>No reports here yet: a run with --report DIR writes them.</p>")
    return page(title, f"{count} · simulated timings, not hardware measurements", f"""\
{body}
<footer>Generated by ipusim. Each row is a report directory (its profile.json); the link opens
its page. Throughput and step time are simulated (the throughput fed by the data loader
where that is slower than the IPUs, as the exit line gives it); the verdict is what limits
the run.</footer>
""", plots=False, style=_STYLE)


def _group(parent: PurePosixPath, entries: list[IndexEntry], headed: bool) -> str:
    """The rows of the reports in one folder, under its name when there are several."""
    heading = (f'<tr class="group"><th colspan="5">{html.escape(str(parent))}/</th></tr>'
               if headed else "")
    return heading + "".join(_row(entry) for entry in entries)


def _row(entry: IndexEntry) -> str:
    def number(value: float | None, digits: int) -> str:
        return "—" if value is None else f"{value:,.{digits}f}"

    link = html.escape(quote(str(entry.link)), quote=True)  # a '#' or '?' in a name, too
    badge = f'<span class="badge">{html.escape(entry.verdict_kind)}</span>' \
        if entry.verdict_kind else ""
    # The indexed folder may be a report itself: its path is ".", named by its page.
    name = entry.path.name or entry.link.name
    fed = ("" if entry.device_throughput is None else
           f'<br><span class="fed">fed by the data loader; the IPUs alone '
           f'{number(entry.device_throughput, 0)}</span>')
    return (f'<tr><td><a href="{link}">{html.escape(name)}</a></td>'
            f'<td class="value">{number(entry.throughput, 0)}{fed}</td>'
            f'<td class="value">{number(entry.step_time_ms, 3)}</td>'
            f'<td class="value">{number(entry.ipus, 0)}</td>'
            f'<td class="verdict-line">{badge}{html.escape(entry.verdict_headline)}</td></tr>')


def write_index(folder: str | Path) -> Path:
    """Write the index page of ``folder`` as ``folder/index.html`` (atomically, its links
    relative to it) and return its path."""
    return write_atomically(Path(folder) / INDEX, render_index(folder))
