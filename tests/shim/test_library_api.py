"""The PopTorch 3.3 API that libraries over PopTorch (optimum-graphcore,
lightning-graphcore) reach for beyond the tutorials: ``poptorch.Attribute``,
``ipuHardwareVersion``, ``poptorch._impl``'s unwrap and rewrap, and
``PoplarExecutor._executable``."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim._core import aliases as _aliases

ROOT = Path(__file__).resolve().parents[2]


def test_attribute_blocks_nest_and_each_exit_restores_what_was_before():
    assert poptorch.Attribute.current == {}
    outer = poptorch.Attribute(__outline={"layer": 1})
    with outer:
        with poptorch.Attribute(__outline={"layer": 2, "kind": "ffn"}, other={"a": 0}):
            assert poptorch.Attribute.current == {"__outline": {"layer": 2, "kind": "ffn"},
                                                  "other": {"a": 0}}
        assert poptorch.Attribute.current == {"__outline": {"layer": 1}}
    assert poptorch.Attribute.current == {}
    # optimum-graphcore enters and exits one object from a module's forward hooks
    outer.__enter__()
    outer.__exit__(None, None, None)
    assert poptorch.Attribute.current == {}


def test_attribute_takes_dicts_only():
    with pytest.raises(TypeError, match=r"Attribute\(__outline=...\) takes a dict .* got int"):
        poptorch.Attribute(__outline=3)


def test_the_hardware_version_is_the_default_systems_mk2():
    assert poptorch.ipuHardwareVersion() == 2


@pytest.mark.parametrize("preset, version", [("mk1", 1), ("gc2", 1), ("bow", 2)])
def test_the_hardware_version_is_the_machines_preset(monkeypatch, preset, version):
    # PopTorch reports 1 on Mk1 hardware, 2 on Mk2 and Bow.
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS", f'{{"Simulation.system": "{preset}"}}')
    assert poptorch.ipuHardwareVersion() == version


def test_unwrap_and_rewrap_leave_the_model_as_the_user_built_it():
    model = torch.nn.Linear(2, 1)
    poptorch.inferenceModel(model)(torch.ones(1, 2))
    classes = (type(model), {type(p) for p in model.parameters()})
    poptorch._impl.unwrapModelIfNecessary(model)
    assert (type(model), {type(p) for p in model.parameters()}) == classes
    poptorch._impl.rewrapModelIfNecessary(model)
    assert classes == (torch.nn.Linear, {torch.nn.Parameter})  # never wrapped
    with pytest.raises(TypeError, match="unwrapModelIfNecessary takes a torch.nn.Module, "
                                        "got PoplarExecutor"):
        poptorch._impl.unwrapModelIfNecessary(poptorch.inferenceModel(model))


def test_the_executable_is_none_until_compiled_and_after_destroy():
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    assert model._executable is None
    model(torch.ones(1, 2))
    assert model._executable is not None
    model.destroy()
    assert model._executable is None


def test_poptorch_impl_is_the_shims_module_under_the_alias():
    code = ("from poptorch._impl import unwrapModelIfNecessary; import poptorch_shim._impl; "
            "import sys; assert sys.modules['poptorch._impl'] is poptorch_shim._impl; "
            "print('shared')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(_aliases.ALIASES), str(ROOT)))}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.strip() == "shared", result.stderr


class Held(torch.nn.Module):
    """A LightningModule in little: its trainer, which its __getstate__ drops (as
    Lightning's does), steers the forward; it also keeps an executor of its own,
    as optimum-graphcore's generation keeps its decoder's."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self._trainer = {"scale": 3.0}
        self.decoder = poptorch.inferenceModel(torch.nn.Linear(2, 2))

    def __getstate__(self):
        return {**self.__dict__, "_trainer": None}

    def forward(self, x):
        return self.linear(x) * self._trainer["scale"]


class Wrapper(torch.nn.Module):
    """Lightning's IPU strategy wraps the LightningModule in a module of its own."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)


@pytest.mark.parametrize("timing_only", [False, True])
def test_compiling_runs_the_users_model_itself_not_a_copy(timing_only):
    model = Wrapper(Held())
    opts = poptorch.Options()
    opts.Simulation.timingOnly(timing_only)
    out = poptorch.inferenceModel(model, opts)(torch.ones(1, 2))
    assert out.shape == (1, 2)
    if not timing_only:
        torch.testing.assert_close(out, model(torch.ones(1, 2)))


def test_the_executor_runs_a_shallow_copy_as_poptorchs_does():
    """PopTorch's note: parameters are shared both ways, plain attributes are not."""
    model = Wrapper(torch.nn.Linear(2, 1))
    training = poptorch.trainingModel(model, poptorch.Options(),
                                      torch.optim.SGD(model.parameters(), lr=0.5))
    inference = poptorch.inferenceModel(training)  # an executor stands for its model
    assert training.model is model
    assert inference.model is not model and inference.model.module is model.module
    inference.model.flag = True
    assert not hasattr(model, "flag")
    x = torch.ones(1, 2)
    before = inference(x)
    training(x)  # its one output is its loss: one training step
    torch.testing.assert_close(inference(x), model(x))  # the updated weights, at once
    assert not torch.equal(inference(x), before)
