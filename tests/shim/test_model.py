"""trainingModel / inferenceModel: PopTorch's batching semantics on real torch compute."""
import copy
import json
import sys

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim import OutputMode, ReductionType


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target=None):
        out = self.fc2(torch.relu(self.fc1(x.reshape(x.shape[0], -1))))
        if target is None:
            return out
        return out, self.loss(out, target)


def data(n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, 3, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def options(di=1, replicas=1, ga=1):
    opts = poptorch.Options().deviceIterations(di).replicationFactor(replicas)
    opts.Training.gradientAccumulation(ga)
    return opts


@pytest.mark.parametrize("di,replicas,ga,mbs", [(1, 1, 1, 4), (3, 1, 1, 2), (1, 4, 1, 2),
                                                 (1, 1, 4, 2), (2, 2, 3, 1), (2, 4, 2, 3)])
def test_weights_equal_plain_torch_on_the_concatenated_batch(di, replicas, ga, mbs):
    torch.manual_seed(1)
    model = Net()
    reference = copy.deepcopy(model)
    x, y = data(di * replicas * ga * mbs)
    shim = poptorch.trainingModel(model, options(di, replicas, ga),
                                  torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    shim(x, y)

    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    per_update = replicas * ga * mbs
    for start in range(0, len(x), per_update):
        optimizer.zero_grad()
        _, loss = reference(x[start:start + per_update], y[start:start + per_update])
        loss.backward()
        optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_sum_reduction_scales_the_update_by_the_micro_batch_count():
    torch.manual_seed(2)
    model = Net()
    reference = copy.deepcopy(model)
    x, y = data(8)
    opts = options(1, 2, 2)
    opts.Training.accumulationAndReplicationReductionType(ReductionType.Sum)
    poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))(x, y)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    _, loss = reference(x, y)
    (loss * 4).backward()
    optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mode,period,expected_rows", [
    (OutputMode.All, None, 32), (OutputMode.EveryN, 2, 16), (OutputMode.Final, None, 8),
    (OutputMode.Sum, None, 8)])
def test_inference_output_modes_return_poptorchs_shapes_and_values(mode, period, expected_rows):
    torch.manual_seed(3)
    model = Net()
    x, _ = data(32)  # deviceIterations 4 x replicas 2 x micro-batch 4
    opts = options(4, 2)
    opts.outputMode(mode, period) if period else opts.outputMode(mode)
    out = poptorch.inferenceModel(model, opts)(x)
    assert out.shape == (expected_rows, 3)
    plain = model(x).detach().reshape(4, 2, 4, 3)  # [iteration, replica, micro-batch, ...]
    expected = {OutputMode.All: plain, OutputMode.EveryN: plain[1::2],
                OutputMode.Final: plain[-1:], OutputMode.Sum: plain.sum(0, keepdim=True)}[mode]
    torch.testing.assert_close(out, expected.reshape(-1, 3), atol=1e-5, rtol=1e-5)


def test_training_defaults_to_final_and_a_scalar_loss_per_replica():
    torch.manual_seed(4)
    model = Net()
    x, y = data(2 * 4 * 4)
    out, loss = poptorch.trainingModel(model, options(2, 4, 1))(x, y)
    assert out.shape == (4 * 4, 3)  # the final iteration's micro-batch of each replica
    assert loss.shape == (4,)
    out, loss = poptorch.trainingModel(Net(), options(2, 1, 1))(*data(8))
    assert loss.dim() == 0 and out.shape == (4, 3)


def test_all_mode_stacks_the_loss_of_every_micro_batch():
    opts = options(2, 2, 1).outputMode(OutputMode.All)
    _, loss = poptorch.trainingModel(Net(), opts)(*data(8))
    assert loss.shape == (4,)


def test_batch_not_a_multiple_of_the_combined_factors_names_them():
    shim = poptorch.trainingModel(Net(), options(2, 2, 3))
    with pytest.raises(ValueError, match=r"\(10\).*deviceIterations \(2\).*replicationFactor "
                                         r"\(2\).*gradientAccumulation \(3\) = 12"):
        shim(*data(10))


def test_every_n_period_must_divide_the_micro_batches_of_a_step():
    opts = options(3).outputMode(OutputMode.EveryN, 2)
    with pytest.raises(ValueError, match=r"EveryN.*2.*3"):
        poptorch.inferenceModel(Net(), opts)


def test_inference_with_gradient_accumulation_is_an_error():
    with pytest.raises(ValueError, match="gradientAccumulation"):
        poptorch.inferenceModel(Net(), options(1, 1, 2))


def test_options_freeze_when_handed_to_a_model():
    opts = options()
    poptorch.inferenceModel(Net(), opts)
    with pytest.raises(AttributeError, match="deviceIterations"):
        opts.deviceIterations(4)


def test_a_training_model_must_return_a_loss():
    with pytest.raises(RuntimeError, match="must return its loss"):
        poptorch.trainingModel(Net(), options())(data(4)[0])


def test_compile_leaves_the_weights_untouched_and_builds_the_device():
    model = Net()
    before = copy.deepcopy(model.state_dict())
    shim = poptorch.trainingModel(model, options(2))
    assert not shim.isCompiled()
    shim.compile(*data(4))
    assert shim.isCompiled()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name])


def test_each_call_advances_the_simulated_clock_by_the_same_step():
    shim = poptorch.trainingModel(Net(), options(4).logCycleCount(True))
    x, y = data(16)
    shim(x, y)
    first = shim.cycleCount()
    shim(x, y)
    assert shim.cycleCount() == first > 0
    steps = shim.timeline.events.groupby("step")["end_ps"].max()
    assert list(steps.index) == [0, 1]


def test_cycle_count_needs_log_cycle_count():
    shim = poptorch.inferenceModel(Net(), options())
    shim(data(4)[0])
    with pytest.raises(RuntimeError, match="logCycleCount"):
        shim.cycleCount()


def test_perf_counters_and_latency_come_from_the_simulated_timeline():
    shim = poptorch.inferenceModel(Net(), options(3))
    shim(data(6)[0])
    counters = shim.getPerfCounters()
    kinds = ("input", "input_complete", "output", "output_complete")
    assert set(counters) == set(kinds)
    for start, loaded, ready, done in zip(*(counters[k][0] for k in kinds)):
        assert start <= loaded <= ready <= done
    low, high, mean = shim.getLatency()
    assert 0 < low <= mean <= high


def test_destroyed_model_must_be_compiled_again():
    shim = poptorch.inferenceModel(Net(), options())
    shim(data(4)[0])
    shim.destroy()
    assert not shim.isCompiled()
    assert shim.getLatency() == (0.0, 0.0, 0.0)
    assert shim.getPerfCounters()["output"] == [[]]
    with pytest.raises(RuntimeError, match="compiled"):
        shim.copyWeightsToHost()
    shim(data(4)[0])
    assert shim.isCompiled()


def test_perf_counters_follow_the_output_mode():
    shim = poptorch.trainingModel(Net(), options(4))  # training: OutputMode.Final
    shim(*data(8))
    counters = shim.getPerfCounters()
    assert len(counters["input"][0]) == 4
    assert len(counters["output"][0]) == len(counters["output_complete"][0]) == 1
    low, high, mean = shim.getLatency()
    # one output stands for all four micro-batches: measured from the first input
    assert low == high == mean == counters["output_complete"][0][0] - counters["input"][0][0]


def test_synthetic_data_is_faster_than_real_data():
    x, y = data(64)
    times = []
    for synthetic in (False, True):
        opts = options(16).enableSyntheticData(synthetic)
        shim = poptorch.trainingModel(Net(), opts)
        shim(x, y)
        times.append(shim.timeline.duration_ps)
    assert times[1] < times[0]


def test_ipu_hardware_is_available_up_to_the_simulated_machine(monkeypatch):
    monkeypatch.setenv("IPUSIM_NUM_IPUS", "8")
    assert poptorch.ipuHardwareIsAvailable(8)
    assert not poptorch.ipuHardwareIsAvailable(9)


@pytest.mark.parametrize("group_type", [poptorch.CommGroupType.Consecutive,
                                        poptorch.CommGroupType.Orthogonal])
def test_input_replica_grouping_gives_a_group_one_input(group_type):
    torch.manual_seed(5)
    model = Net()
    reference = copy.deepcopy(model)
    x, y = data(2 * 3)  # 4 replicas in 2 input groups, micro-batch 3
    opts = options(1, 4, 1).inputReplicaGrouping(2, group_type).outputMode(OutputMode.All)
    out, _ = poptorch.inferenceModel(copy.deepcopy(model), opts.clone())(x, y)
    order = [0, 0, 1, 1] if group_type == poptorch.CommGroupType.Consecutive else [0, 1, 0, 1]
    expected = torch.cat([model(x[3 * g:3 * g + 3]) for g in order]).detach()
    torch.testing.assert_close(out, expected)

    poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))(x, y)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(x, y)[1].backward()
    optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


class TwoOutputs(torch.nn.Module):
    """Returns a loss and a one-element output: the loss must still be found."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 1)

    def forward(self, x, target):
        out = self.fc(x)
        return torch.nn.functional.mse_loss(out, target), out


def test_the_loss_is_found_by_the_function_that_made_it():
    torch.manual_seed(6)
    model = TwoOutputs()
    reference = copy.deepcopy(model)
    x, y = torch.randn(1, 3), torch.randn(1, 1)
    poptorch.trainingModel(model, options(), torch.optim.SGD(model.parameters(), lr=0.1))(x, y)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(x, y)[0].backward()
    optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs)


class TwoLosses(TwoOutputs):
    def forward(self, x, target):
        out = self.fc(x)
        return (torch.nn.functional.mse_loss(out, target),
                torch.nn.functional.huber_loss(out, target))


def test_two_losses_are_an_error_and_identity_loss_combines_them():
    x, y = torch.randn(2, 3), torch.randn(2, 1)
    with pytest.raises(RuntimeError, match="2 losses.*identity_loss"):
        poptorch.trainingModel(TwoLosses(), options())(x, y)

    class Combined(TwoLosses):
        def forward(self, x, target):
            a, b = super().forward(x, target)
            return a, poptorch.identity_loss(a + b, reduction="none")

    torch.manual_seed(7)
    model = Combined()
    reference = copy.deepcopy(model)
    poptorch.trainingModel(model, options(), torch.optim.SGD(model.parameters(), lr=0.1))(x, y)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    sum(TwoLosses.forward(reference, x, y)).backward()
    optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs)


def test_a_detached_model_attaches_again_when_called():
    shim = poptorch.trainingModel(Net(), options())
    x, y = data(4)
    shim(x, y)
    shim.detachFromDevice()
    assert not shim.isAttachedToDevice()
    shim(x, y)
    assert shim.isAttachedToDevice()


def test_a_new_micro_batch_size_after_compiling_is_an_error():
    shim = poptorch.inferenceModel(Net(), options(2))
    shim(data(8)[0])
    with pytest.raises(ValueError, match="micro-batches of 1 samples but the model was compiled "
                                         "for 4"):
        shim(data(2)[0])


def test_poprun_instances_on_one_ipu_m2000_share_its_host_link():
    """Four one-replica instances get a quarter of the link each (each simulates its own IPU)."""
    x, y = data(8)
    copy_ps = {}
    for processes in (1, 4):
        opts = options(8)
        opts.Distributed.configureProcessId(0, processes)
        shim = poptorch.trainingModel(Net(), opts)
        shim(x, y)
        assert shim.device.spec.host_link_bandwidth == 12.5e9 / processes
        events = shim.timeline.events
        copies = events[events["kind"] == "host_to_device"]
        copy_ps[processes] = (copies["end_ps"] - copies["start_ps"]).mean()
    assert copy_ps[4] > copy_ps[1]


def tiny_ipu_options():
    """An IPU with 4 KiB of SRAM a tile (5.9 MB in all): a 1000x1000 layer cannot fit."""
    opts = options()
    opts.Simulation.system("mk2", sram_per_tile_bytes=4096)
    return opts


def test_a_model_that_does_not_fit_names_the_ipu_and_the_bytes():
    shim = poptorch.inferenceModel(torch.nn.Linear(1000, 1000), tiny_ipu_options())
    with pytest.raises(ValueError, match=r"Out of memory on IPU 0 \(model stage .*\): it needs "
                                         r"[\d,]+\.\d MB") as caught:
        shim(torch.zeros(1, 1000))
    message = str(caught.value)  # what would help, in PopTorch's words
    for option in ("poptorch.BeginBlock", "batch_size", "debug.allowOutOfMemory"):
        assert option in message
    # An inference model keeps no optimizer state and recomputes nothing.
    assert "autoRecomputation" not in message and "setOptimizerLocation" not in message
    net = torch.nn.Linear(1000, 1000)
    training = poptorch.trainingModel(_WithLoss(net), tiny_ipu_options(),
                                      torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="Out of memory") as caught:
        training(torch.zeros(1, 1000), torch.zeros(1, 1000))
    assert "autoRecomputation', 3)" in str(caught.value)
    assert "setOptimizerLocation" in str(caught.value)


class _WithLoss(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, target):
        out = self.net(x)
        return out, torch.nn.functional.mse_loss(out, target)


def test_profiling_with_allow_out_of_memory_simulates_and_reports_the_excess(tmp_path):
    opts = tiny_ipu_options().enableProfiling(str(tmp_path))
    shim = poptorch.inferenceModel(torch.nn.Linear(1000, 1000), opts)
    with pytest.warns(UserWarning, match="allowOutOfMemory"):
        shim(torch.zeros(1, 1000))
    memory = shim.device.memory
    assert (memory["total"] > memory["capacity"]).all()
    over = memory["total"].iloc[0] / memory["capacity"].iloc[0]
    shim.destroy()
    directory = tmp_path / "inference"
    assert (directory / "report.html").exists()
    # Every output's headline says first that it does not fit, and by how much.
    said = f"Does not fit: IPU 0 needs {memory['total'].iloc[0] / 1e6:,.1f} MB"
    profile = json.loads((directory / "profile.json").read_text())
    assert profile["verdict"]["headline"].startswith(said)
    assert f"({over:.0%}, " in profile["verdict"]["headline"]
    assert said in (directory / "summary.txt").read_text().replace("\n  ", " ")
    assert said in (directory / "report.html").read_text()


@pytest.mark.parametrize("mode, period, returned", [
    (OutputMode.EveryN, 3, [2, 5]), (OutputMode.All, None, [0, 1, 2, 3, 4, 5]),
    (OutputMode.Final, None, [5]), (OutputMode.Sum, None, [5])])
def test_the_simulated_outputs_go_back_for_the_micro_batches_the_mode_returns(
        mode, period, returned):
    """Which micro-batches' outputs cross the host link, not only which the
    shim assembles: EveryN(3) of six device iterations sends the 3rd and 6th."""
    opts = poptorch.Options()
    opts.deviceIterations(6)
    opts.outputMode(mode, *([period] if period else []))
    model = poptorch.inferenceModel(torch.nn.Linear(4, 2), opts)
    model(torch.ones(6, 4))
    events = model.timeline.events
    sent = events[events["kind"] == "device_to_host"]["micro_batch"].tolist()
    assert sorted(sent) == returned


def test_a_model_that_does_not_fit_still_leaves_a_report_of_its_memory(tmp_path):
    opts = tiny_ipu_options()  # a report asked for, out of memory not allowed
    opts._Popart.set("engineOptions", {"autoReport.all": "true",
                                       "autoReport.directory": str(tmp_path)})
    shim = poptorch.inferenceModel(torch.nn.Linear(1000, 1000), opts)
    with pytest.raises(ValueError, match="Out of memory on IPU 0") as caught:
        shim(torch.zeros(1, 1000))
    directory = tmp_path / "inference"
    profile = json.loads((directory / "profile.json").read_text())
    assert isinstance(caught.value, poptorch.Error)  # as PopTorch raises it
    assert profile["out_of_memory"] == caught.value.message
    (ipu,) = profile["memory"]["per_ipu"]
    assert ipu["total"] > ipu["capacity"] and profile["memory"]["fits"] is False
    page = (directory / "report.html").read_text()
    assert "out_of_memory" in page and "#d62728" in page  # the share over 100% in red
    assert f"({ipu['total'] / ipu['capacity']:.0%})  OVER" in \
        (directory / "summary.txt").read_text()


@pytest.mark.parametrize("training", [False, True])
def test_a_model_nested_hundreds_deep_runs_as_in_torch(training):
    layer = torch.nn.Linear(4, 4)
    deep = layer
    for _ in range(180):  # plain torch runs it under the default recursion limit
        deep = torch.nn.Sequential(deep)
    expected = deep(torch.ones(2, 4))
    limit = sys.getrecursionlimit()
    if training:
        model = poptorch.trainingModel(_WithLoss(deep), optimizer=torch.optim.SGD(
            deep.parameters(), lr=0.0))
        out, _ = model(torch.ones(2, 4), torch.zeros(2, 4))
    else:
        model = poptorch.inferenceModel(deep)
        model.compile(torch.ones(2, 4))
        out = model(torch.ones(2, 4))
    assert torch.allclose(out, expected)
    assert sys.getrecursionlimit() == limit  # put back after each call
