"""Design-space sweeps: points, measurement, figures, errors, results that survive interruption.

A sweep point must say what running the model that way says: its figures are
the timeline's of the same model run through the shim with the same
options. Points sharing a stage signature share one measurement; a point
PopTorch refuses is a row with PopTorch's error; an interrupted sweep
resumes to exactly the table an uninterrupted one gives, computing no
finished point again, and leaves no worker process behind.
"""
import html
import json
import multiprocessing
import os
import signal

import pandas as pd
import pytest
import torch

import poptorch_shim as poptorch
from ipusim.explore.design_point import outcomes, pareto_front
from poptorch_shim.commands import main as ipusim_main
from poptorch_shim.sweep import (
    InProcess,
    LocalProcesses,
    Measurements,
    ModelSource,
    SweepSpec,
    read_results,
    sweep,
)
from poptorch_shim.sweep.backends import WorkersLost
from poptorch_shim.sweep.settings import as_code
from poptorch_shim.sweep.spec import from_dict
from poptorch_shim.sweep.store import ResultsStore

from sweep_models import pipelined

SOURCE = ModelSource(factory="sweep_models:pipelined")
SPACE = {"replicationFactor": [1, 2, 4], "Training.gradientAccumulation": [2, 8, 32],
         "micro_batch": [4, 8]}


def spec(**extra) -> SweepSpec:
    return SweepSpec(model=SOURCE, space=dict(SPACE), **extra)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The whole sweep in this process, and the measurements it made."""
    measurements = Measurements(SOURCE)
    path = tmp_path_factory.mktemp("whole") / "results.parquet"
    return sweep(spec(), path, InProcess(), measurements=measurements), measurements


def test_a_grid_is_every_combination_and_a_sample_is_seeded_and_distinct():
    points = spec().points()
    assert len(points) == 18 and points[0] == {"replicationFactor": 1,
                                               "Training.gradientAccumulation": 2,
                                               "micro_batch": 4}
    assert len({spec().point_id(p) for p in points}) == 18
    sample = spec(sample=7, seed=3).points()
    assert len({json.dumps(p, sort_keys=True) for p in sample}) == 7
    assert all(p in points for p in sample)
    assert sample == spec(sample=7, seed=3).points() != spec(sample=7, seed=4).points()
    # The identity of a point does not depend on the order of its settings.
    assert spec().point_id({"a": 1, "b": 2}) == spec().point_id({"b": 2, "a": 1})


def test_each_stage_signature_is_measured_once(uninterrupted):
    table, measurements = uninterrupted
    assert len(table) == 18
    assert len(measurements) == 2  # two micro-batch sizes; replicas and GA reuse them


def test_a_point_refused_by_poptorch_is_recorded_with_its_error(uninterrupted):
    table, _ = uninterrupted
    refused = table[table["Training.gradientAccumulation"] == 2]
    assert len(refused) == 6
    # Two stages over two IPUs: a training pipeline of 3 stages needs GA >= 3.
    assert refused["error"].str.contains(
        r"poptorch.Options\(\).Training.gradientAccumulation must be greater than or equal to "
        r"the number of pipeline stages \(3\)").all()
    assert refused["throughput(items/s)"].isna().all() and refused["fits"].isna().all()
    assert table.loc[table["Training.gradientAccumulation"] != 2, "error"].isna().all()


def test_a_points_figures_are_those_of_the_model_run_with_its_options(uninterrupted):
    table, _ = uninterrupted
    row = table[(table["replicationFactor"] == 2) & (table["Training.gradientAccumulation"] == 8)
                & (table["micro_batch"] == 8)].iloc[0]
    model, _, opts, optimizer = pipelined(micro_batch=8)
    opts.replicationFactor(2)
    opts.Simulation.timingOnly(True)
    training = poptorch.trainingModel(model, opts, optimizer)
    samples = 8 * 2 * 8
    training(torch.randn(samples, 32), torch.randint(0, 32, (samples,)))
    timeline, memory = training.timeline, training.device.memory
    assert row["throughput(items/s)"] == pytest.approx(timeline.throughput(), rel=1e-12)
    assert row["step(ms)"] == pytest.approx(timeline.duration_ps / 1e9, rel=1e-12)
    assert row["bubble_fraction"] == pytest.approx(timeline.bubble_fraction())
    assert row["ipus"] == timeline.num_ipus == 4
    assert row["pipeline_stages"] == timeline.plan.pipeline_depth == 3
    assert json.loads(row["utilisation_per_ipu"]) == pytest.approx(
        list(timeline.utilisation()), abs=1e-6)
    assert row["memory_max(MB)"] == pytest.approx(memory["total"].max() / 1e6)
    assert bool(row["fits"]) is True


def test_interrupted_sweep_resumes_to_the_same_table_computing_no_point_twice(
        tmp_path, uninterrupted):
    path = tmp_path / "results.parquet"
    seen = []
    others = set(multiprocessing.active_children())  # children this sweep did not start

    def interrupt_after_three(row):
        # On disk before anyone sees it.
        assert row["point_id"] in ResultsStore(path, lock=False).done
        seen.append(row["point_id"])
        if len(seen) == 3:
            raise KeyboardInterrupt  # as Ctrl-C would, in the middle of the sweep

    with pytest.raises(KeyboardInterrupt):
        sweep(spec(), path, LocalProcesses(2), on_result=interrupt_after_three)
    assert set(multiprocessing.active_children()) <= others  # its workers were stopped
    kept = read_results(path)
    assert len(kept) == 3 and set(kept["point_id"]) == set(seen)

    resumed = []
    table = sweep(spec(), path, LocalProcesses(2),
                  on_result=lambda row: resumed.append(row["point_id"]))
    assert len(resumed) == 15 and not set(resumed) & set(seen)
    pd.testing.assert_frame_equal(table, uninterrupted[0])
    # Once complete, running the sweep again computes nothing.
    again = []
    sweep(spec(), path, InProcess(), on_result=lambda r: again.append(r))
    assert again == []


def test_a_killed_worker_stops_the_sweep_which_then_resumes(tmp_path, uninterrupted):
    path, seen = tmp_path / "results.parquet", []
    others = set(multiprocessing.active_children())

    def kill_a_worker(row):
        seen.append(row)
        if len(seen) == 8:
            worker = (set(multiprocessing.active_children()) - others).pop()
            os.kill(worker.pid, signal.SIGKILL)
            worker.join()  # dead, not dying, when the sweep goes on

    with pytest.raises(WorkersLost, match="a worker process died"):
        sweep(spec(), path, LocalProcesses(2), on_result=kill_a_worker)
    assert set(multiprocessing.active_children()) <= others
    assert len(read_results(path)) == len(seen) < 18
    table = sweep(spec(), path, LocalProcesses(2))
    pd.testing.assert_frame_equal(table, uninterrupted[0])


def test_a_sweep_killed_before_the_table_was_written_keeps_its_journal(tmp_path):
    path = tmp_path / "results.csv"
    store = ResultsStore(path, rewrite_every_s=3600)
    store.add({"point": 0, "point_id": "a", "throughput(items/s)": 1.0, "error": None})
    store.add({"point": 1, "point_id": "b", "throughput(items/s)": None, "error": "ValueError"})
    assert not path.exists()  # the process is killed here: only the journal holds the rows
    store._release()  # as its death releases the results file's lock
    with store.journal.open("a") as journal:
        journal.write('{"point": 2, "point_id": "c", "thro')  # a line cut by the kill
    reopened = ResultsStore(path)
    assert reopened.done == {"a", "b"}
    reopened.close()
    assert not reopened.journal.exists()
    assert list(pd.read_csv(path)["point_id"]) == ["a", "b"]


def test_csv_and_parquet_hold_the_same_results(tmp_path, uninterrupted):
    table = sweep(spec(), tmp_path / "results.csv", InProcess())
    pd.testing.assert_frame_equal(table, uninterrupted[0], check_dtype=False)


def test_a_spec_with_an_unknown_setting_names_it():
    with pytest.raises(ValueError, match="Unknown setting 'Training.gradientAcumulation'"):
        from_dict({"model": {"factory": "sweep_models:pipelined"},
                   "space": {"Training.gradientAcumulation": [1, 2]}})
    with pytest.raises(ValueError, match=r"\[space\] replicationFactor: expected a non-empty"):
        from_dict({"model": {"factory": "sweep_models:pipelined"},
                   "space": {"replicationFactor": 4}})


def test_settings_become_the_poptorch_code_that_makes_them():
    code = as_code({"replicationFactor": 4, "syncPattern": "SyncPattern.SinglePipeline",
                    "Precision.setPartialsType": "torch.float16",
                    "Simulation.system": ["bow", 16, {"clock_hz": 1.2e9}],
                    "pipeline": {"L0": 0, "L1": 1}})
    assert code.splitlines() == [
        "opts.replicationFactor(4)",
        "opts.syncPattern(poptorch.SyncPattern.SinglePipeline)",
        "opts.Precision.setPartialsType(torch.float16)",
        "# simulated with ipusim's opts.Simulation.system('bow', 16, clock_hz=1200000000.0) "
        "(not a PopTorch option)",
        'opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("L0").ipu(0), '
        'poptorch.Stage("L1").ipu(1)))']
    # The code runs and makes the options the sweep simulated.
    opts = poptorch.Options()
    exec(code, {"opts": opts, "poptorch": poptorch, "torch": torch})
    assert opts.replication_factor == 4
    # Only PopTorch's own calls are code: what ipusim simulates is a comment.
    assert not any("Simulation" in line for line in code.splitlines()
                   if not line.startswith("#"))
    recompute = as_code({"recomputation": "Pipeline"})
    assert recompute == ('opts._Popart.set("autoRecomputation", 3)  '
                         '# RecomputationType::Pipeline')


def test_a_pipeline_split_is_a_block_to_ipu_table(tmp_path):
    split = {"space": {"pipeline": [{"L0": 0, "L1": 0, "L2": 1, "L3": 1},
                                    {"L0": 0, "L1": 1, "L2": 2, "L3": 3},
                                    {"L0": 0, "L1": 1, "L9": 2, "L3": 3}]},
             "fixed": {"Training.gradientAccumulation": 16},
             "model": {"factory": "sweep_models:pipelined"}}
    table = sweep(from_dict(split), backend=InProcess())
    assert list(table["ipus"].iloc[:2]) == [2, 4]
    assert table["bubble_fraction"].iloc[1] > table["bubble_fraction"].iloc[0]  # 7 stages vs 3
    # A split naming a block the model does not start: PopTorch's error, for that point only.
    assert table["error"].iloc[2].startswith(
        "ValueError: Unknown Block 'L2': the model starts a block that the execution strategy "
        "PipelinedExecution does not list. List of expected Blocks: ['L0', 'L1', 'L9', 'L3']")
    assert table["error"].iloc[:2].isna().all()


def test_the_pareto_front_keeps_points_no_other_beats_on_throughput_and_memory():
    # Points with an error (4) or that do not fit (6, the fastest and smallest) are no choice.
    table = pd.DataFrame({"throughput(items/s)": [10.0, 20.0, 15.0, 30.0, None, 40.0, 99.0],
                          "memory_max(MB)": [1.0, 2.0, 3.0, 3.0, 0.5, 9.0, 0.1],
                          "fits": [True, True, True, True, None, True, False],
                          "error": [None, None, None, None, "ValueError", None, None]})
    assert list(pareto_front(table)) == [0, 1, 3, 5]


def test_a_sweeps_outcomes_count_points_that_fit_do_not_and_were_refused():
    table = pd.DataFrame({"fits": [True, False, None, True, None],
                          "error": [None, None, "ValueError", None, "RuntimeError"]})
    assert outcomes(table) == {"fit": 2, "do not fit": 1, "invalid": 2}


def test_ipusim_sweep_runs_a_spec_and_writes_its_report(tmp_path, capsys):
    spec_path = tmp_path / "tiny.toml"
    spec_path.write_text('[model]\nfactory = "sweep_models:pipelined"\n'
                         '[sweep]\noutput = "tiny.csv"\n'
                         '[space]\nreplicationFactor = [1, 2]\n'
                         '"Training.gradientAccumulation" = [2, 8]\n')
    status = ipusim_main(["sweep", str(spec_path), "--workers", "0", "--no-progress",
                          "--report", str(tmp_path / "report")])
    assert status == 0
    out = capsys.readouterr().out
    assert "4 points: 2 fit, 0 do not fit, 2 invalid" in out
    assert len(pd.read_csv(tmp_path / "tiny.csv")) == 4
    page = (tmp_path / "report" / "sweep.html").read_text()
    linked = sorted((tmp_path / "report" / "points").glob("*.html"))
    assert linked and all(f'href="points/{p.name}"' in page for p in linked)
    check = page.split('<pre id="sweep-check" hidden>')[1].split("</pre>")[0]
    assert json.loads(html.unescape(check)).items() >= {
        "points": 4, "runs": 2, "refused": 2, "pareto": len(linked), "links": len(linked)}.items()


def test_a_half_precision_point_updates_half_weights():
    """The point's model is cast to its precision with the optimizer that holds its
    parameters: the update it prices moves half weights."""
    import torch

    import poptorch_shim as poptorch
    from poptorch_shim.sweep.measure import ModelCase, measure

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(64, 64)

        def forward(self, x):
            out = self.layer(x)
            return out, out.float().pow(2).mean()

    model = WithLoss()
    case = ModelCase(model, (torch.zeros(8, 64),), {}, poptorch.Options(), True,
                     poptorch.optim.AdamW(model.parameters(), lr=0.1))
    widths = {precision: measure(case, {"precision": precision}).optimizer.weight_width
              for precision in ("float32", "float16")}
    assert widths == {"float32": 4, "float16": 2}
    assert next(model.parameters()).dtype == torch.float32   # the script's model untouched
