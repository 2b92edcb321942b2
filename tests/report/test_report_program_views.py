"""The report's program views: the step's program tree and its execution trace by
program step, as PopVision draws them, from the graph profile's program steps."""
import re

from ipusim.analysis.program_steps import MAX_TRACE_BOXES, execution_trace, program_tree
from ipusim.report.program_views import program_views_section


def test_the_trace_lays_each_ipus_program_steps_end_to_end(pipeline_timeline):
    steps = pipeline_timeline.graph_profile().steps
    boxes = execution_trace(steps)
    assert len(boxes) == len(steps) and boxes["steps"].eq(1).all()
    for _, on in boxes.groupby("ipu"):
        ends = (on["start"] + on["cycles"]).to_numpy()
        assert on["start"].iloc[0] == 0 and (on["start"].to_numpy()[1:] == ends[:-1]).all()
    assert int(boxes["cycles"].sum()) == int(steps.cycles.sum())


def test_a_long_step_is_drawn_as_runs_of_one_operator_keeping_its_cycles(pipeline_timeline):
    steps = pipeline_timeline.graph_profile().steps
    boxes = execution_trace(steps, limit=len(steps) - 1)
    assert len(boxes) < len(steps) and int(boxes["steps"].sum()) == len(steps)
    assert int(boxes["cycles"].sum()) == int(steps.cycles.sum())
    assert MAX_TRACE_BOXES >= 1_000


def test_the_section_lists_the_tree_from_its_root_and_draws_the_trace(pipeline_timeline):
    graph = pipeline_timeline.graph_profile()
    page = program_views_section(graph, {})
    tree = program_tree(graph.steps)
    assert tree[-1].name == "step" and 'id="execution-trace"' in page
    calls = [p for p in tree if p.kind == "Call"]
    assert calls and all(f"Call {p.name[5:]}" in page for p in calls)
    # Each pass's body is listed once, however many times it is called.
    for call in calls:
        body = tree[call.children[0] - len(graph.steps.programs)]
        assert len(re.findall(rf"Sequence {re.escape(body.name)}</span>", page)) == 1
