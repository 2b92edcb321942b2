"""PopTorch's compile hooks: run around each model's compilation, removable by handle."""
import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim._core.compile_hooks import compiling


def model():
    return poptorch.inferenceModel(torch.nn.Linear(4, 2), poptorch.Options())


def test_hooks_run_in_order_around_each_compilation_and_can_be_removed():
    seen = []
    handles = [poptorch.registerPreCompileHook(lambda: seen.append(("pre", compiling()[0]))),
               poptorch.registerPostCompileHook(lambda: seen.append(("post", compiling()[0])))]
    try:
        first = model()
        first(torch.ones(2, 4))
        first(torch.ones(2, 4))                 # compiled once: no more hooks
        assert seen == [("pre", first), ("post", first)]
        handles[0].remove()
        second = model()
        second(torch.ones(2, 4))
        assert seen[2:] == [("post", second)]
    finally:
        for handle in handles:
            handle.remove()
    assert compiling() is None


def test_the_post_compile_hook_runs_when_compiling_fails():
    ran = []
    handle = poptorch.registerPostCompileHook(lambda: ran.append(True))
    try:
        with pytest.raises(RuntimeError):
            model()(torch.ones(2, 5))           # 5 features into a 4-feature layer
    finally:
        handle.remove()
    assert ran == [True]


def test_a_hook_must_be_callable():
    with pytest.raises(RuntimeError, match="Pre-compile hook must be callable"):
        poptorch.registerPreCompileHook(3)
    with pytest.raises(RuntimeError, match="Post-compile hook must be callable"):
        poptorch.registerPostCompileHook("not a function")


def test_the_sweep_captures_a_scripts_first_model_through_a_pre_compile_hook(tmp_path):
    from poptorch_shim._core import compile_hooks
    from poptorch_shim.sweep.measure import from_script
    from poptorch_shim.sweep.spec import ModelSource
    after = tmp_path / "after_compile"
    script = tmp_path / "script.py"
    script.write_text(
        "import torch, poptorch\n"
        "model = poptorch.inferenceModel(torch.nn.Linear(3, 2), poptorch.Options())\n"
        "model(torch.ones(5, 3))\n"
        f"open({str(after)!r}, 'w').write('ran on')\n")
    case = from_script(ModelSource(script=str(script)))
    assert isinstance(case.model, torch.nn.Linear) and case.inputs[0].shape == (5, 3)
    assert not case.training
    assert not after.exists()                   # the script stopped at its first compile
    assert not compile_hooks._PRE_COMPILE       # and the sweep's hook is gone
