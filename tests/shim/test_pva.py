"""``import pva`` on the profiles a PopTorch script writes: ``profile.pop`` where PopTorch
writes it, its program steps, tiles, liveness and operations, and a model whose
fullest tile does not fit refused though its total does."""
import inspect
import json

import numpy as np
import pytest
import torch
from support.reports import fresh_report_registry

import poptorch_shim as poptorch
from ipusim.analysis.liveness import liveness_windows
from ipusim.analysis.program_steps import program_steps
from poptorch_shim import pva
from poptorch_shim._run import model_reports

STEPS = 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(64, 10)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        out = self.fc2(self.relu(self.fc1(x)))  # the line the forward's operators name
        return out, self.loss(out, y)


FORWARD_LINE = inspect.getsourcelines(Net.forward)[1] + 1


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """A training model run with autoReport engine options, its report written: the
    autoReport directory and the model."""
    root = tmp_path_factory.mktemp("autoreport")
    with pytest.MonkeyPatch.context() as monkeypatch:
        fresh_report_registry(monkeypatch)
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(2)
        opts._Popart.set("engineOptions", {"autoReport.all": "true",
                                           "autoReport.directory": str(root),
                                           "autoReport.outputDebugInfo": "true"})
        net = Net()
        model = poptorch.trainingModel(net, opts, optimizer=poptorch.optim.Adam(
            net.parameters(), lr=0.01))
        for _ in range(STEPS):
            model(torch.randn(16, 32), torch.randint(0, 10, (16,)))
        model_reports.write_pending_reports()
    return root, model


@pytest.fixture(scope="module")
def report(profiled):
    root, _ = profiled
    return pva.openReport(str(root / "training" / "profile.pop"), str(root / "debug.cbor"))


def test_profile_pop_is_written_where_poptorch_writes_it_beside_ipusims_report(profiled):
    root, _ = profiled
    folder = root / "training"
    assert {"profile.pop", "profile.json", "host.pvti"} <= {p.name for p in folder.iterdir()}
    assert (root / "debug.cbor").is_file()  # the autoReport directory's, as PopTorch's


def test_the_target_and_graph_are_the_simulated_ipus(report, profiled):
    _, model = profiled
    target = report.compilation.target
    ipu = model.timeline.run.compute_ipu(model.timeline.system.ipu)
    assert (target.numTiles, target.tilesPerIpu, target.numIPUs) == (ipu.tiles, ipu.tiles, 1)
    assert target.clockFrequency == ipu.clock_hz
    assert target.bytesPerTile == ipu.sram_per_tile_bytes
    assert "ipusim" in report.poplarVersion.string
    executes = {s.program.name for s in report.execution.steps
                if s.program.type is pva.Program.Type.OnTileExecute}
    assert report.compilation.graph.numComputeSets == len(executes)


def test_the_execution_steps_add_up_to_the_simulated_steps_device_cycles(report, profiled):
    _, model = profiled
    timeline = model.timeline
    events = timeline.events
    last = events[(events["step"] == events["step"].max()) & (events["replica"] == 0)
                  & ~events["kind"].isin(["host_call", "io_tiles_copy", "host_link_wait"])]
    device_cycles = sum(timeline.to_cycles(d) for d in last["end_ps"] - last["start_ps"])
    steps = report.execution.steps
    total = sum(step.ipus[0].cycles for step in steps)
    # every event's cycles, each operator's steps rounded on their own
    assert abs(total - device_cycles) <= len(steps)
    assert report.execution.totalCycles == total
    kinds = {step.program.type.value for step in steps}
    assert {"OnTileExecute", "DoExchange", "Sync", "StreamCopyBegin", "StreamCopyMid",
            "StreamCopyEnd"} <= kinds


def test_a_step_of_more_program_steps_than_a_profile_lists_is_cut_at_a_whole_event(profiled,
                                                                                 report):
    _, model = profiled
    assert report.execution.eventsListed == report.execution.eventsTotal
    whole = program_steps(model.timeline)
    cut = program_steps(model.timeline, limit=len(whole) // 2)
    assert cut.events_total == whole.events_total and cut.events_listed < whole.events_listed
    assert len(cut) <= len(whole) // 2
    assert [cut.step(i) for i in range(len(cut))] == [whole.step(i) for i in range(len(cut))]
    # whole events: the cut is where an event ends, one step fewer drops that event
    assert len(program_steps(model.timeline, limit=len(cut))) == len(cut)
    assert program_steps(model.timeline, limit=len(cut) - 1).events_listed == \
        cut.events_listed - 1


def test_a_visitor_sees_each_program_by_its_kind(report):
    class Counter(pva.ProgramVisitor):
        def __init__(self):
            self.seen = {}

        def visitOnTileExecute(self, onTileExecute):
            self.seen.setdefault("OnTileExecute", []).append(
                len(onTileExecute.computeset.vertices))

        def visitSync(self, sync):
            self.seen.setdefault("Sync", []).append(sync.name)

        def visitStreamCopyMid(self, streamCopyMid):
            self.seen.setdefault("StreamCopyMid", []).append(streamCopyMid.name)

    counter = Counter()
    for step in report.execution.steps:
        step.program.accept(counter)
    executes = [s for s in report.execution.steps
                if s.program.type is pva.Program.Type.OnTileExecute]
    assert len(counter.seen["OnTileExecute"]) == len(executes)
    assert set(counter.seen["OnTileExecute"]) == {1}  # each compute set runs one kind of work
    assert counter.seen["StreamCopyMid"]
    sequences = [p for p in report.compilation.programs if p.type is pva.Program.Type.Sequence]
    assert all(child.type is not pva.Program.Type.Sequence
               for sequence in sequences for child in sequence.children)


def test_the_parameters_lie_on_the_tiles_as_named_variables(report, profiled):
    _, model = profiled
    always = {v.name: v.size for v in report.compilation.alwaysLiveVariables}
    for name, parameter in model.model.named_parameters():
        size = parameter.numel() * parameter.element_size()
        assert always[name] == size
        assert always[f"{name}/accumulator"] == size      # gradient accumulation
        assert always[f"{name}/optimizer"] == 2 * size    # Adam's two moments
    tiles = report.compilation.tiles
    assert len(tiles) == report.compilation.target.numTiles
    assert sum(t.memory.category.weights.total for t in tiles) == sum(
        p.numel() * 4 for p in model.model.parameters())
    memory = [t.memory for t in tiles]
    assert all(m.total.includingGaps == m.total.excludingGaps for m in memory)
    assert all(m.total.includingGaps <= report.compilation.target.bytesPerTile for m in memory)
    assert max(m.total.includingGaps for m in memory) == memory[0].total.includingGaps


def test_liveness_keeps_weights_live_and_activations_from_write_to_last_read(report):
    steps = report.compilation.livenessProgramSteps
    names = [step.program.name for step in steps]
    assert len(steps) == len(report.execution.steps)
    live_at = [{v.name for v in step.notAlwaysLiveMemory.variables} for step in steps]
    for index, step in enumerate(steps):
        live = step.notAlwaysLiveMemory
        assert live.bytes == sum(v.size for v in live.variables)
        assert not any(v.category == "weights" for v in live.variables)
    for batch in (0, 1):  # each micro-batch's stash: from its forward to its backward
        stash = f"model/stash/mb{batch}"
        where = [i for i, live in enumerate(live_at) if stash in live]
        assert where == list(range(where[0], where[-1] + 1))
        assert "/forward/" in names[where[0]] and "/backward/" in names[where[-1]]
    gradients = [i for i, live in enumerate(live_at) if "fc1.weight/gradient" in live]
    assert "/backward/" in names[gradients[0]] and "/weight_update/" in names[gradients[-1]]
    peak = max(steps, key=lambda step: step.notAlwaysLiveMemory.bytes)
    assert peak.notAlwaysLiveMemory.bytes == max(s.notAlwaysLiveMemory.bytes for s in steps)
    # a tile holds at most the peak of what is live on it, none of the always-live
    tile = report.compilation.tiles[0]
    assert tile.memory.notAlwaysLiveBytes == max(
        s.notAlwaysLiveMemoryForTile(tile).bytes for s in steps)


def test_the_html_report_shows_memory_by_tile_and_liveness(profiled, report):
    root, model = profiled
    page = (root / "training" / "report.html").read_text()
    assert "<h2>Tiles and liveness</h2>" in page
    assert 'id="tile-memory"' in page and 'id="liveness"' in page
    graph = model.timeline.graph_profile(model.device.named)
    windows = liveness_windows(graph.liveness, windows=7)
    assert len(windows) == 7 and windows["bytes"].max() == graph.peak.bytes
    assert windows["first"].iloc[0] == 0 and windows["last"].iloc[-1] == len(graph.steps) - 1
    fullest = graph.tiles.loc[graph.tiles["total"].idxmax()]
    assert f"fullest: tile {int(fullest['tile'])} of IPU 0" in page
    assert f"peak at step {graph.peak.step} " in page


def test_operations_name_their_module_and_the_users_line(report):
    # Each operation's own context is named by its place in the profile; the poptorch
    # layer above it by the module path and the operation's PopTorch type.
    operations = {op.debugContext.name: op for op in pva.OperationAnalysis(report).operations}
    first = operations["model/forward/aten::addmm/0"]
    context = first.debugContext
    poptorch_layer = context.parents[0]
    assert json.loads(poptorch_layer.layer)["layer"] == "poptorch"
    assert json.loads(poptorch_layer.json)["module"] == "fc1"
    assert first.name == json.loads(poptorch_layer.json)["op_name"] == "fc1/MatMul"
    assert poptorch_layer.location.fileName == __file__
    assert poptorch_layer.location.lineNumber == FORWARD_LINE
    assert json.loads(operations["model/forward/aten::addmm/1"].debugContext.parents[0]
                      .json)["module"] == "fc2"
    assert first.type == "aten::addmm" and first.cycles > 0
    assert sum(op.cycles for op in operations.values()) <= report.execution.totalCycles
    # A gradient operator carries the context of the forward operator it differentiates.
    backward = [op for name, op in operations.items() if "/backward/" in name]
    assert backward and all(op.debugContext.parents for op in backward)
    assert {json.loads(op.debugContext.parents[0].json)["module"] for op in backward
            if op.type == "aten::mm"} == {"fc1", "fc2"}


def test_the_report_and_trace_name_each_operator_by_its_module_and_line(profiled):
    root, _ = profiled
    where = f"{__file__}:{FORWARD_LINE}"
    trace = json.loads((root / "training" / "trace.json").read_text(encoding="utf-8"))
    slices = {e["name"]: e["args"] for e in trace["traceEvents"] if e.get("cat") == "operator"}
    assert slices["fc1/aten::addmm"]["sources"] == [f"fc1 {where}"]
    assert slices["relu/aten::threshold_backward"]["sources"] == [f"relu {where}"]
    page = (root / "training" / "report.html").read_text(encoding="utf-8")
    assert f'title="{where}">fc1 · test_pva.py:{FORWARD_LINE}</span>' in page


def test_what_a_simulation_does_not_give_raises_and_says_why(report):
    graph = report.compilation.graph
    assert not hasattr(graph, "numVertices")
    with pytest.raises(pva.NotSimulatedError, match="numVertices is not simulated: "):
        graph.numVertices  # noqa: B018
    with pytest.raises(pva.NotSimulatedError, match="vertexCode.*weights"):
        report.compilation.tiles[0].memory.category.vertexCode  # noqa: B018


def test_the_host_trace_lists_each_call(profiled):
    root, _ = profiled
    trace = pva.openTrace(str(root / "training" / "host.pvti"))
    calls = trace.processes[0].threads[0].events
    assert [event.label for event in calls] == [f"training call {i}" for i in range(STEPS)]
    assert all(event.duration > 0 and event.children() == [] for event in calls)


def test_open_report_refuses_what_ipusim_did_not_write(tmp_path, profiled):
    root, _ = profiled
    with pytest.raises(ValueError, match="not an ipusim profile"):
        pva.openReport(str(root / "training" / "host.pvti"))
    with pytest.raises(FileNotFoundError):
        pva.openReport(str(tmp_path / "profile.pop"))


def test_a_model_whose_fullest_tile_does_not_fit_is_refused_though_its_total_fits():
    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(200_000, 1)  # one column: one tile holds it all

        def forward(self, x):
            return self.table(x).sum()

    model = poptorch.inferenceModel(Lookup())
    with pytest.raises(poptorch.errors.OutOfMemoryError) as raised:
        model(torch.randint(0, 100, (4,)))
    message = str(raised.value)
    assert "Out of memory on tile 0 of IPU 0" in message
    assert "table.weight (800,000 bytes)" in message
    assert "the fullest tile, not the total, does not fit" in message
    assert "debug.allowOutOfMemory" in message
    opts = poptorch.Options()
    opts._Popart.set("engineOptions", {"debug.allowOutOfMemory": "true"})
    with pytest.warns(UserWarning, match="tile 0 of IPU 0"):
        assert poptorch.inferenceModel(Lookup(), opts)(torch.randint(0, 100, (4,))).shape == ()
    wide = torch.nn.Embedding(30_000, 64)  # the same rows' columns spread over the tiles
    assert np.isfinite(poptorch.inferenceModel(wide)(torch.randint(0, 100, (4,))).numpy()).all()


class LstmModel(torch.nn.Module):
    """PopTorch's own profiling model (precompilation_test.py's): an LSTM and a softmax in
    a block, a ReLU, and the loss made by identity_loss."""

    def __init__(self):
        super().__init__()
        self.relu = torch.nn.ReLU()
        self.lstm = torch.nn.LSTM(3, 3)
        self.softmax = torch.nn.LogSoftmax(1)

    def forward(self, x):
        x, _ = self.lstm(x)
        x = self.softmax(x)
        x = self.relu(x)
        loss = poptorch.identity_loss(x**2, reduction="sum")
        return x, loss


def test_a_model_only_compiled_leaves_its_graph_profile_with_each_operations_source(
        tmp_path, monkeypatch):
    # What PopTorch's test_pva_annotations checks: a training model compiled for an offline
    # target with autoReport options leaves training/profile.pop and debug.cbor, and every
    # operation (forward, gradient, weight update) names its PopTorch operation and the line
    # of the model that made it.
    fresh_report_registry(monkeypatch)
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps({
        "autoReport.directory": str(tmp_path), "autoReport.all": "true",
        "autoReport.outputDebugInfo": "true", "autoReport.outputExecutionProfile": "false"}))
    model = LstmModel()
    opts = poptorch.Options()
    opts.useOfflineIpuTarget()
    training = poptorch.trainingModel(model, opts,
                                      optimizer=poptorch.optim.SGD(model.parameters(), lr=0.0))
    training.compile(torch.randn(1, 1, 3))
    report = pva.openReport(str(tmp_path / "training" / "profile.pop"),
                            str(tmp_path / "debug.cbor"))
    assert report.execution.steps == [] and report.compilation.livenessProgramSteps
    source, first = inspect.getsourcelines(LstmModel.forward)
    lines = {call: first + next(i for i, text in enumerate(source) if call in text)
             for call in ("self.lstm(", "self.softmax(", "self.relu(", "identity_loss(")}
    passes = set()
    for op in pva.OperationAnalysis(report).operations:
        passes.add(op.debugContext.name.split("/")[1])
        layer = op.debugContext.parents[0]
        data = json.loads(layer.json)
        assert json.loads(layer.layer)["layer"] == data["layer"] == "poptorch"
        assert layer.location.fileName == __file__ and op.name == data["op_name"]
        if data["op_type"] in ("Pow", "Identityloss"):
            assert data["op_name"] == data["op_type"]
            assert layer.location.lineNumber == lines["identity_loss("]
        else:
            module = data["op_name"].removesuffix("/" + data["op_type"])
            assert module in ("lstm", "softmax", "relu")
            assert layer.location.lineNumber == lines[f"self.{module}("]
    assert passes == {"forward", "backward", "weight_update"}


def test_a_model_run_and_left_alive_has_its_profile_written(tmp_path, monkeypatch):
    # PopTorch's options_test: profile.pop exists once the model has run, destroyed or not.
    fresh_report_registry(monkeypatch)
    opts = poptorch.Options()
    opts.modelName("tommyflowers")
    opts.enableProfiling(str(tmp_path))
    model = poptorch.inferenceModel(torch.nn.Linear(8, 8), opts)
    model(torch.randn(4, 8))
    assert (tmp_path / "tommyflowers" / "profile.pop").is_file()


def _expanded(program) -> list:
    """The program steps a program runs, in order: a Sequence's children, a Repeat's body
    ``count`` times, a Call's function."""
    kind = program.type
    if kind is pva.Program.Type.Sequence:
        return [step for child in program.children for step in _expanded(child)]
    if kind is pva.Program.Type.Repeat:
        return _expanded(program.children[0]) * program.count
    if kind is pva.Program.Type.Call:
        return _expanded(program.children[0])
    return [program]


def test_the_program_tree_repeats_the_micro_batches_and_calls_each_pass(tmp_path, monkeypatch):
    fresh_report_registry(monkeypatch)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    opts.deviceIterations(2)
    opts._Popart.set("engineOptions", {"autoReport.all": "true",
                                       "autoReport.directory": str(tmp_path)})
    net = Net()
    model = poptorch.trainingModel(net, opts, optimizer=poptorch.optim.SGD(net.parameters(),
                                                                           lr=0.1))
    model(torch.randn(24, 32), torch.randint(0, 10, (24,)))
    model.destroy()
    report = pva.openReport(str(tmp_path / "training" / "profile.pop"))
    root, = report.compilation.controlPrograms
    # The tree runs exactly the execution's program steps, in their order.
    assert [p.name for p in _expanded(root)] == [s.program.name for s in report.execution.steps]
    kinds = pva.Program.Type
    top = root.children
    repeats = [p for p in top if p.type is kinds.Repeat]
    # The first device iteration's 3 micro-batches are one body repeated (the last one's
    # outputs go back to the host, so the second iteration's last differs).
    assert repeats[0].count == 3
    body = [c.name for c in repeats[0].children[0].children if c.type is kinds.Call]
    assert body == ["call stage0/forward", "call stage0/backward"]
    updates = [p for p in top if p.type is kinds.Call and p.name.endswith("weight_update")]
    assert len(updates) == 2  # one weight update a device iteration
    assert len({id(p.children[0]) for p in updates}) == 1  # the same function called twice
