"""Profiling reports of a simulated run: HTML, autoReport directory, Chrome trace, text.

All of them read a :class:`ipusim.Timeline` and the figures it computes
(:mod:`ipusim.analysis.headline`, :mod:`ipusim.analysis.pipeline_phases`,
:mod:`ipusim.analysis.bottleneck`);
none of them simulates or computes a figure of its own. The plotting is kept
here, away from the simulator, so ``ipusim`` itself never needs plotly.
"""
from ipusim.plan.setting_names import SettingNames
from ipusim.report.autoreport import (
    OUTPUT_FILES,
    load_autoreport,
    load_profile,
    outputs_from_engine_options,
    write_autoreport,
    write_out_of_memory_report,
)
from ipusim.report.chrome_trace import chrome_trace, write_chrome_trace
from ipusim.report.figures import memory_figure, timeline_figure, utilisation_figure
from ipusim.report.html import render_html, write_html
from ipusim.report.summary import text_summary
from ipusim.report.verdict import Verdict, bottleneck

__all__ = [
    "OUTPUT_FILES", "SettingNames", "Verdict", "bottleneck", "chrome_trace",
    "load_autoreport", "load_profile", "memory_figure",
    "outputs_from_engine_options", "render_html",
    "text_summary", "timeline_figure", "utilisation_figure", "write_autoreport",
    "write_out_of_memory_report",
    "write_chrome_trace", "write_html",
]
