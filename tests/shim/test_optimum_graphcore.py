"""What the shim knows of optimum-graphcore: its generation loop's decoder step, on the
host or on the device, found by the class optimum defines; and the words its users
set a model's settings by."""
import sys

import pytest
import torch

from ipusim.plan.setting_names import SETTING_WORDS
from poptorch_shim._core.option_names import (
    DEVICE_LOOP_ITERATIONS,
    REPORT_NAMES,
    TRAINER_LOADER_WORDS,
    report_names,
)
from poptorch_shim._execution.optimum_graphcore import (
    device_generation_loop,
    host_generation_loop,
    library_of,
    without_device_loop,
)


def module_class(module: str, name: str, base=torch.nn.Module) -> type:
    """A class as a module of that name defines it."""
    return type(name, (base,), {"__module__": module})


class DecoderWrapper(torch.nn.Module):  # the shim's own test module: not optimum's
    def __init__(self, inner):
        super().__init__()
        self.pipelined_model = inner


OPTIMUM_WRAPPER = type("DecoderWrapper", (DecoderWrapper,),
                       {"__module__": "optimum.graphcore.generation.utils"})
ON_DEVICE = module_class("optimum.graphcore.generation.on_device_generation",
                         "OnDeviceGenerationModel")


@pytest.mark.parametrize("model, on_host, on_device", [
    (OPTIMUM_WRAPPER(torch.nn.Linear(2, 2)), True, False),
    (OPTIMUM_WRAPPER(ON_DEVICE()), False, True),
    (DecoderWrapper(torch.nn.Linear(2, 2)), False, False),  # a class of the same name
    (torch.nn.Linear(2, 2), False, False),
])
def test_optimums_decoder_step_is_found_by_its_class(model, on_host, on_device):
    assert host_generation_loop(model) is on_host
    assert device_generation_loop(model) is on_device


def test_a_model_the_users_own_code_wraps_is_its_own():
    assert library_of() is None  # called from this test module


def test_a_model_optimum_wraps_is_found_by_its_caller():
    for module, library in (("optimum.graphcore.trainer", "trainer"),
                            ("optimum.graphcore.generation.utils", "optimum"),
                            ("optimum.graphcore", "optimum"), ("optimum_graphcore_x", None)):
        code = compile("found = library_of()", f"<{module}>", "exec")
        scope = {"__name__": module, "library_of": library_of}
        exec(code, scope)  # a frame whose module is ``module``
        assert scope["found"] == library, module


IPU_CONFIG = {"device_iterations": "IPUConfig.device_iterations",
              "replicas": "IPUConfig.replication_factor",
              "gradient_accumulation": "IPUConfig.gradient_accumulation_steps"}


@pytest.mark.parametrize("library, training, words", [
    (None, True, {}),
    ("optimum", True, IPU_CONFIG),
    ("optimum", False, {**IPU_CONFIG,
                        "device_iterations": "IPUConfig.inference_device_iterations",
                        "replicas": "IPUConfig.inference_replication_factor"}),
    ("trainer", True, {**IPU_CONFIG, **TRAINER_LOADER_WORDS}),
])
def test_the_words_of_a_model_are_its_users(library, training, words):
    names = report_names(library, training)
    for setting in SETTING_WORDS:
        expected = words.get(setting, REPORT_NAMES.words.get(setting, SETTING_WORDS[setting]))
        assert names.words.get(setting, SETTING_WORDS[setting]) == expected, setting


def test_the_device_iterations_of_a_loop_on_the_device_are_its_steps():
    names = report_names("optimum", False, device_loop=True)
    assert names.word("device_iterations") == DEVICE_LOOP_ITERATIONS
    assert names.phrase("device_iterations", 16).endswith("on_device_generation_steps=...) = 16")


def test_a_host_loop_optimum_keeps_no_kv_cache_for_is_told_what_the_device_loop_needs(
        monkeypatch):
    # optimum-graphcore's registry of the pipelined models it keeps a KV cache for
    # (its @supports_kv_cache): only those can generate on the device.
    cached = module_class("optimum.graphcore.models.t5", "PipelinedT5ForConditionalGeneration")
    uncached = module_class("optimum.graphcore.models.gpt2", "PipelinedGPT2LMHeadModel")
    registry = type(torch)("optimum.graphcore.generation.utils")
    registry.MODELS_SUPPORTING_KV_CACHE = {cached}
    monkeypatch.setitem(sys.modules, registry.__name__, registry)
    assert without_device_loop(OPTIMUM_WRAPPER(cached())) is None
    assert without_device_loop(OPTIMUM_WRAPPER(ON_DEVICE())) is None  # already on the device
    found = without_device_loop(OPTIMUM_WRAPPER(uncached()))
    assert found == ("PipelinedGPT2LMHeadModel", ("PipelinedT5ForConditionalGeneration",))
    said = report_names("optimum", False, no_device_loop=found).word("on_device_loop", 4)
    assert said == ("optimum-graphcore's on-device generation, which needs the KV cache it "
                    "keeps only for PipelinedT5ForConditionalGeneration "
                    "(PipelinedGPT2LMHeadModel has none): one of those, parallelize("
                    "for_generation=True, use_cache=True, on_device_generation_steps=4)")
    monkeypatch.delitem(sys.modules, registry.__name__)
    assert without_device_loop(OPTIMUM_WRAPPER(uncached())) is None  # optimum not imported
