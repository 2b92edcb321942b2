"""Custom operators: PopTorch's own (``FastGatherLastDim``, as optimum-graphcore's
DeBERTa calls it, with its PopART op's checks) and the user's, registered with a
torch reference and, optionally, a cost; an unregistered one refused with how to
register it, or priced from its example outputs in a timing-only run."""
import pytest
import torch

import poptorch_shim as poptorch
from ipusim import Cost, Kernel, KernelKind
from poptorch_shim._ops import custom_ops


class Gather(torch.nn.Module):
    """DeBERTa's relative-position gather, through PopTorch's custom operator."""

    def forward(self, data, index):
        return poptorch.custom_op([data, index], "FastGatherLastDim", "poptorch.custom_ops", 1,
                                  example_outputs=[torch.zeros(index.shape, dtype=data.dtype)])[0]


def test_fast_gather_last_dim_gathers_along_the_last_dimension():
    data = torch.randn(2, 3, 8)
    index = torch.randint(0, 8, (2, 3, 5), dtype=torch.int32)
    out = poptorch.inferenceModel(Gather())(data, index)
    torch.testing.assert_close(out, torch.gather(data, -1, index.long()))


def test_fast_gather_last_dim_trains_as_a_gather():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(4, 8))

        def forward(self, index):
            out = Gather()(self.table, index)
            return out, poptorch.identity_loss(out.sum(), reduction="none")

    model = Model()
    start = model.table.detach().clone()
    index = torch.tensor([[0, 1], [2, 2], [7, 7], [3, 0]])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    poptorch.trainingModel(model, optimizer=optimizer)(index)
    expected = start.clone()
    for row in range(4):
        for column in index[row]:
            expected[row, column] -= 1.0
    torch.testing.assert_close(model.table.detach(), expected)


def test_fast_gather_last_dim_checks_its_shapes_and_needs_hardware(monkeypatch):
    gather = Gather()
    with pytest.raises(poptorch.Error, match="Input and Index tensors do not have same rank"):
        gather(torch.ones(2, 8), torch.zeros(2, 1, 1, dtype=torch.int32))
    with pytest.raises(poptorch.Error, match="Index tensor must have same dimensions as Input "
                                             "except for last dim"):
        gather(torch.ones(2, 8), torch.zeros(3, 1, dtype=torch.int32))
    monkeypatch.setenv("POPTORCH_IPU_MODEL", "1")
    with pytest.raises(poptorch.Error, match="FastGatherLastDimOp requires hardware but IPU "
                                             "model is enabled"):
        gather(torch.ones(2, 8), torch.zeros(2, 1, dtype=torch.int32))


def test_poptorchs_softplus_and_upsample_have_their_attributes_defaults():
    x = torch.randn(1, 2, 3, 3)
    softplus = poptorch.custom_op([x], "TorchSoftplus", "poptorch.custom_ops", 1, [x],
                                  {"beta": 2.0})[0]
    torch.testing.assert_close(softplus, torch.nn.functional.softplus(x, 2.0, 1.0))
    upsampled = poptorch.custom_op([x], "UpsampleBilinear2d", "poptorch.custom_ops", 1,
                                   [torch.zeros(1, 2, 6, 6)])[0]
    torch.testing.assert_close(upsampled, torch.nn.functional.interpolate(
        x, scale_factor=2.0, mode="bilinear", align_corners=False))


class Scaled(torch.nn.Module):
    def forward(self, x):
        return poptorch.custom_op([x], "Scale", "my.ops", 1, [x], {"factor": 3.0})[0]


@pytest.fixture
def registry(monkeypatch):
    """The registry as it was, whatever a test registers."""
    monkeypatch.setattr(custom_ops, "_REGISTRY", dict(custom_ops._REGISTRY))


def test_an_unregistered_operator_says_how_to_register_it(registry):
    with pytest.raises(poptorch.Error, match=r"custom operator my.ops::Scale \(version 1\) is "
                                             r"registered.*poptorch.registerCustomOp\('Scale', "
                                             r"'my.ops', reference, cost=None\)"):
        poptorch.inferenceModel(Scaled())(torch.ones(4))


def test_a_timing_only_run_prices_an_unregistered_operator_from_its_example_outputs(registry):
    opts = poptorch.Options()
    opts.Simulation.timingOnly(True)
    model = poptorch.inferenceModel(Scaled(), opts)
    with pytest.warns(UserWarning, match="my.ops::Scale has no registered implementation"):
        model(torch.ones(4096))
    kernels = model.device.work.stages[0].forward.kernels
    assert [(k.kind, k.elements) for k, _ in kernels] == [(KernelKind.DATA, 4096)]


def test_a_registered_reference_computes_and_its_operators_are_priced(registry):
    poptorch.registerCustomOp("Scale", "my.ops", lambda x, factor: x * factor)
    model = poptorch.inferenceModel(Scaled())
    torch.testing.assert_close(model(torch.ones(4096)), torch.full((4096,), 3.0))
    kernels = model.device.work.stages[0].forward.kernels
    assert [(k.kind, k.op) for k, _ in kernels] == [(KernelKind.ELEMENTWISE, "aten::mul")]


def test_a_registered_cost_is_charged_instead_of_the_references_operators(registry):
    given = Kernel(KernelKind.TRANSCENDENTAL, 4, elements=4096, bytes=2 * 4096 * 4,
                   op="my.ops::Scale")
    poptorch.registerCustomOp(
        "Scale", "my.ops", lambda x, factor: x * factor,
        cost=lambda x, factor: Cost(flops=4096.0, bytes=2 * 4096 * 4, ops=1,
                                    kernels=((given, 1),)))
    model = poptorch.inferenceModel(Scaled())
    torch.testing.assert_close(model(torch.ones(4096)), torch.full((4096,), 3.0))
    forward = model.device.work.stages[0].forward
    assert forward.kernels == ((given, 1),)
    assert forward.flops == 4096.0 and forward.ops == 1


def test_the_references_outputs_must_match_the_example_outputs(registry):
    poptorch.registerCustomOp("Scale", "my.ops", lambda x, factor: (x * factor).double())
    with pytest.raises(poptorch.Error, match=r"output 0 is torch.float64 of shape \(4,\) but "
                                             r"example_outputs\[0\] is torch.float32"):
        poptorch.inferenceModel(Scaled())(torch.ones(4))


def test_attributes_are_checked_as_poptorch_checks_them():
    x = torch.ones(2)
    for attributes, message in (({1: 2}, "All attribute keys must be strings."),
                                ({"a": None}, "Attribute values must be floats"),
                                ({"a": [1, "b"]}, "The types in a list/tuple attribute"),
                                ({"a": "é"}, "contains non-ASCII characters")):
        with pytest.raises(ValueError, match=message):
            poptorch.custom_op([x], "TorchSoftplus", "poptorch.custom_ops", 1, [x], attributes)
