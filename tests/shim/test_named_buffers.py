"""Buffers the host updates: ``Options.updatableNamedBuffers`` and
``PoplarExecutor.copyNamedBuffersToDevice``, checked as PopTorch checks them
(its buffers_test.py), the copy a host-to-device stream copy on the timeline."""
import pytest
import torch

import poptorch_shim as poptorch
from ipusim.cost.cost_model import DEFAULT
from ipusim.engine.event_kinds import HOST_TO_DEVICE


class UpdatableBuffer(torch.nn.Module):
    def __init__(self, size: int = 1):
        super().__init__()
        self.register_buffer("buffer_1", torch.ones(size))
        self.register_buffer("buffer_2", torch.ones(size))

    def forward(self, x):
        return torch.sum(x + self.buffer_1.sum() + self.buffer_2.sum())


def model_with(*names: str, size: int = 1) -> poptorch.PoplarExecutor:
    options = poptorch.Options()
    if names:
        options.updatableNamedBuffers(list(names))
    return poptorch.inferenceModel(UpdatableBuffer(size), options)


def test_a_buffer_updated_and_copied_is_what_the_next_call_reads():
    model = model_with("buffer_1")
    x = torch.ones(3)
    assert model(x) == 9
    model.buffer_1.copy_(model.buffer_1 + 1)
    model.copyNamedBuffersToDevice()
    assert model(x) == 12


def test_copying_without_updatable_buffers_is_refused_in_poptorchs_words():
    model = model_with()
    assert model(torch.ones(3)) == 9
    with pytest.raises(poptorch.poptorch_core.Error,
                       match="No named buffers marked as updatable via updatableNamedBuffers "
                             "option"):
        model.copyNamedBuffersToDevice()


def test_an_unknown_buffer_is_refused_when_the_model_compiles():
    model = model_with("buffer_3")
    with pytest.raises(poptorch.poptorch_core.Error,
                       match=r"Invalid updatable buffer buffer_3: .*Did you mean 'buffer_2'"):
        model(torch.ones(3))


def test_copying_before_compiling_is_refused():
    with pytest.raises(poptorch.Error, match="Model has not been compiled or has been destroyed"):
        model_with("buffer_1").copyNamedBuffersToDevice()


def test_the_option_takes_a_list_of_names():
    with pytest.raises(TypeError, match="updatableNamedBuffers"):
        poptorch.Options().updatableNamedBuffers("buffer_1")
    with pytest.raises(TypeError, match=r"buffers\[\.\.\.\]"):
        poptorch.Options().updatableNamedBuffers([1])


def test_the_copy_is_a_host_to_device_stream_copy_of_the_buffers_bytes_before_the_next_call():
    model = model_with("buffer_1", "buffer_2", size=4096)
    x = torch.ones(3)
    model(x)
    before = model.device.simulation.now_ps
    model.copyNamedBuffersToDevice()
    after = model.device.simulation.now_ps
    model(x)
    events = model.timeline.events
    copies = events[(events["kind"] == HOST_TO_DEVICE) & (events["micro_batch"] == -1)]
    assert list(copies["bytes"]) == [2 * 4096 * 4]     # both buffers, fp32
    copy = copies.iloc[0]
    spec = model.device.spec
    assert copy["end_ps"] - copy["start_ps"] == DEFAULT.host_transfer_ps(2 * 4096 * 4, spec, 1)
    assert before <= copy["start_ps"] and copy["end_ps"] <= after
    assert copy["step"] == 1                            # before the second call
    assert model.device.step_durations[0] == model.device.step_durations[1]  # calls unchanged


def test_synthetic_data_streams_no_buffers():
    options = poptorch.Options().updatableNamedBuffers(["buffer_1"])
    options.enableSyntheticData(True)
    model = poptorch.inferenceModel(UpdatableBuffer(), options)
    model(torch.ones(3))
    before = model.device.simulation.now_ps
    model.copyNamedBuffersToDevice()
    assert model.device.simulation.now_ps == before
