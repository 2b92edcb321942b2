"""PopTorch's numerics-changing operators: ``serializedMatMul`` computes the
product as the serial parts its mode asks for (and is measured as them),
``dynamic_slice`` and ``dynamic_update`` compute PopTorch's reference (a slice,
a slice_scatter) with the start read at run time, traced and timing-only too."""
import pytest
import torch
from torch import nn

import poptorch_shim as poptorch
from ipusim import KernelKind
from poptorch_shim._execution.cost_probe import measure

Mode = poptorch.MatMulSerializationMode


@pytest.mark.parametrize("mode", list(Mode))
def test_a_serialized_matmul_is_the_matmul(mode):
    torch.manual_seed(0)
    lhs, rhs = torch.randn(3, 8, 12), torch.randn(12, 16)
    out = poptorch.serializedMatMul(lhs, rhs, mode, 4)
    torch.testing.assert_close(out, lhs @ rhs)


@pytest.mark.parametrize("mode, part", [
    (Mode.InputChannels, (8, 64, 128)),   # m split: 32 rows in 4 parts
    (Mode.ReducingDim, (32, 16, 128)),    # n split
    (Mode.OutputChannels, (32, 64, 32)),  # p split
])
def test_a_serialized_matmul_is_measured_as_its_serial_parts(mode, part):
    lhs, rhs = torch.randn(32, 64), torch.randn(64, 128)
    with measure() as measured:
        poptorch.serializedMatMul(lhs, rhs, mode, 4)
    matmuls = [(k, count) for k, count in measured.cost.kernels if k.kind is KernelKind.MATMUL]
    assert [((k.m, k.k, k.n), count) for k, count in matmuls] == [(part, 4)]
    with measure() as whole:
        poptorch.serializedMatMul(lhs, rhs, Mode.Disabled)
    assert measured.cost.flops >= whole.cost.flops == 2 * 32 * 64 * 128


def test_keep_precision_adds_half_parts_in_float32():
    torch.manual_seed(1)
    lhs, rhs = torch.randn(4, 64).half(), torch.randn(64, 4).half()
    kept = poptorch.serializedMatMul(lhs, rhs, Mode.ReducingDim, 8, keep_precision=True)
    parts = [a @ b for a, b in zip(lhs.chunk(8, -1), rhs.chunk(8, 0))]
    assert kept.dtype == torch.float16
    assert torch.equal(kept, sum(p.float() for p in parts).half())


@pytest.mark.parametrize("mode, factor, message", [
    (Mode.OutputChannels, 3, "factor 3 must be a factor of the dimension OutputChannels "
                             "splits, of size 16"),
    (Mode.InputChannels, 0, "factor 0 must be a factor of the dimension InputChannels"),
    ("reducing_dim", 2, "mode must be a poptorch.MatMulSerializationMode"),
])
def test_a_serialized_matmul_refuses_what_popart_would(mode, factor, message):
    with pytest.raises(poptorch.Error, match=message):
        poptorch.serializedMatMul(torch.randn(8, 12), torch.randn(12, 16), mode, factor)


class Serialized(nn.Module):
    """A linear layer whose product is serialised, and a loss."""

    def __init__(self, mode: Mode):
        super().__init__()
        torch.manual_seed(2)
        self.weight = nn.Parameter(torch.randn(8, 6))
        self.mode = mode

    def forward(self, x, target):
        out = poptorch.serializedMatMul(x, self.weight, self.mode, 2)
        return out, nn.functional.mse_loss(out, target)


def test_a_serialized_matmul_trains_as_the_matmul_does():
    x, target = torch.randn(4, 8), torch.randn(4, 6)
    models = [Serialized(mode) for mode in (Mode.ReducingDim, Mode.Disabled)]
    for model in models:
        poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))(
            x, target)
    torch.testing.assert_close(models[0].weight, models[1].weight)
    assert not torch.equal(models[0].weight, Serialized(Mode.Disabled).weight)


@pytest.mark.parametrize("start, size, step", [(1, 4, 1), (1, 4, 2), (2, 5, 3), (0, 8, 1)])
def test_dynamic_slice_is_the_slice(start, size, step):
    tensor = torch.arange(16.0).reshape(2, 8)
    out = poptorch.dynamic_slice(tensor, 1, torch.tensor([start]), size, step)
    assert torch.equal(out, tensor[:, start:start + size:step])


def test_dynamic_update_is_slice_scatter_and_leaves_its_input():
    tensor, src = torch.zeros(3, 8), -torch.ones(3, 2)
    out = poptorch.dynamic_update(tensor, src, 1, torch.tensor([5], dtype=torch.int32), 2)
    assert torch.equal(out, torch.slice_scatter(tensor, src, 1, 5, 7))
    assert torch.equal(tensor, torch.zeros(3, 8))


@pytest.mark.parametrize("call, message", [
    (lambda t: poptorch.dynamic_slice(t, 0, 1, 2, 1), "Slice start argument to dynamic_slice "
                                                      "must be a torch.tensor"),
    (lambda t: poptorch.dynamic_slice(t, 0, torch.tensor([1]), 0, 1),
     r"the start and end of a slice must be different \(size 0\)"),
    (lambda t: poptorch.dynamic_slice(t, 0, torch.tensor([1.0]), 2, 1),
     "the start must be an integer tensor, got torch.float32"),
    (lambda t: poptorch.dynamic_update(t, t[:2].int(), 0, torch.tensor([1]), 2),
     r"same dtype. \(torch.float32 vs torch.int32\)"),
    (lambda t: poptorch.dynamic_update(t, t[:3], 0, torch.tensor([1]), 2),
     "src has 3 elements along dimension 0 but the slice it fills has size 2"),
])
def test_dynamic_ops_refuse_what_poptorch_refuses(call, message):
    with pytest.raises(poptorch.Error, match=message):
        call(torch.zeros(8))


class Window(nn.Module):
    """Reads a window of its input at an offset given as data, and writes it back doubled."""

    def forward(self, x, offset):
        window = poptorch.dynamic_slice(x, 1, offset, 2, 1)
        return poptorch.dynamic_update(x, window * 2, 1, offset, 2)


def test_the_offset_is_data_each_call_reads():
    model = poptorch.inferenceModel(Window())
    x = torch.arange(6.0).reshape(1, 6)
    assert model(x, torch.tensor([[1]])).tolist() == [[0, 2, 4, 3, 4, 5]]
    assert model(x, torch.tensor([[3]])).tolist() == [[0, 1, 2, 6, 8, 5]]


def test_the_dynamic_ops_run_pipelined_and_timing_only():
    """Traced by torch.fx (a pipeline is split by tracing), each op is one node;
    timing-only, the offset has no data and the ops still measure."""
    class Staged(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = nn.Linear(6, 6), nn.Linear(6, 6)

        def forward(self, x, offset):
            with poptorch.Block(ipu_id=0):
                x = self.first(x)
            with poptorch.Block(ipu_id=1):
                window = poptorch.dynamic_slice(x, 1, offset, 2, 1)
                return poptorch.dynamic_update(self.second(x), window, 1, offset, 2)

    x, offset = torch.randn(2, 6), torch.tensor([[2], [2]])
    torch.manual_seed(3)
    eager = Staged()
    expected = eager(x[:1], offset[:1])
    for timing_only in (False, True):
        opts = poptorch.Options().deviceIterations(2)
        opts.Simulation.timingOnly(timing_only)
        model = poptorch.inferenceModel(eager, opts)
        out = model(x, offset)
        assert out.shape == (2, 6)
        if not timing_only:
            torch.testing.assert_close(out, torch.cat([expected, eager(x[1:], offset[1:])]))
        assert model.device.step_durations[0] > 0


def test_nop_is_the_identity_priced_as_a_copy_on_the_tiles():
    class Model(torch.nn.Module):
        def forward(self, x):
            return poptorch.nop(x) + 1

    executor = poptorch.inferenceModel(Model())
    torch.testing.assert_close(executor(torch.ones(4096)), torch.full((4096,), 2.0))
    kinds = [(k.kind.value, k.op) for k, _ in executor.device.work.stages[0].forward.kernels]
    assert kinds == [("data", "aten::copy_"), ("elementwise", "aten::add")]
    with pytest.raises(poptorch.Error, match="nop must take a torch.tensor argument. "
                                             "<class 'list'> is not supported."):
        poptorch.nop([1])


class Printing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([1.0, 2.0]))

    def forward(self, x):
        a = poptorch.ipu_print_tensor(x * self.weight, "summation")
        return a, poptorch.identity_loss(a.sum(), reduction="none")


def test_a_printed_tensor_prints_each_time_the_program_computes_it_and_its_gradient(capsys):
    opts = poptorch.Options().deviceIterations(2)
    model = poptorch.trainingModel(Printing(), opts)
    model(torch.tensor([[1.0, 1.0], [3.0, 3.0]]))
    printed = capsys.readouterr().out.splitlines()
    # Not while compiling: once per micro-batch (the second after the first's update, SGD's
    # default lr 0.01), and its gradient in the backward.
    assert printed == ["summation: ((1.0000, 2.0000))", "summation_gradient: ((1.0000, 1.0000))",
                       "summation: ((2.9700, 5.9700))", "summation_gradient: ((1.0000, 1.0000))"]


def test_the_print_format_options():
    from poptorch_shim._ops.tensor_text import format_tensor

    assert format_tensor(torch.arange(6).reshape(2, 3)) == "((0, 1, 2), (3, 4, 5))"
    assert format_tensor(torch.arange(10), summarise_threshold=4, edge_items=2) == \
        "(0, 1, ..., 8, 9)"
    assert format_tensor(torch.tensor([1.5e9, 2.0])) == "(1.5000e+09, 2.0000e+00)"
    assert format_tensor(torch.tensor([0.5]), digits=2, float_format="fixed",
                         open_bracket="[", close_bracket="]") == "[0.50]"
    wrapped = format_tensor(torch.arange(30), max_line_width=20)
    assert all(len(line) <= 20 for line in wrapped.splitlines()) and len(wrapped.splitlines()) > 1
    with pytest.raises(poptorch.Error, match="ipu print tensor must take a torch.tensor"):
        poptorch.ipu_print_tensor(3)
    with pytest.raises(poptorch.Error, match="float_format must be one of"):
        poptorch.ipu_print_tensor(torch.ones(1), float_format="hex")
