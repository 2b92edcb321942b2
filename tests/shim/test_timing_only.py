"""Timing-only runs, precision and recomputation: what real models need.

A timing-only model is measured once on fake tensors and then only
simulated; its timeline must be exactly the one a full run gives, since the
measured operators are the same. The cost follows the dtype the model really
runs in, and recomputation trades stash memory for a second forward.
"""
import copy
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn as nn

import poptorch_shim as poptorch
from ipusim import CALIBRATED_MK2, MK2_GC200, KernelKind
from poptorch_shim._execution.cost_probe import measure
from poptorch_shim._execution.fake import fake_inputs
from poptorch_shim.blocks import Block
from poptorch_shim.strategies import PipelinedExecution

ROOT = Path(__file__).resolve().parents[2]


class SmallCNN(nn.Module):
    """Convolutions, BatchNorm, a residual and a loss: the kinds of operator a real model has."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.norm = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x, labels=None):
        x = poptorch.recomputationCheckpoint(torch.relu(self.norm(self.conv1(x))))
        x = poptorch.recomputationCheckpoint(x + torch.relu(self.conv2(x)))
        logits = self.fc(x.mean(dim=(2, 3)))
        if labels is None:
            return logits
        return logits, nn.functional.cross_entropy(logits, labels)


def options(timing_only: bool, **extra) -> poptorch.Options:
    opts = poptorch.Options()
    opts.deviceIterations(2)
    opts.replicationFactor(2)
    opts.Training.gradientAccumulation(3)
    opts.Simulation.timingOnly(timing_only)
    opts.logCycleCount(True)
    for name, value in extra.items():
        getattr(opts, name)(value)
    return opts


def batch(samples: int = 4 * 2 * 2 * 3, dtype=torch.float32):
    torch.manual_seed(0)
    return torch.randn(samples, 3, 8, 8, dtype=dtype), torch.randint(0, 10, (samples,))


def run(timing_only: bool, calls: int = 2, model=None, opts=None):
    torch.manual_seed(1)
    model = model or SmallCNN()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    training = poptorch.trainingModel(model, opts or options(timing_only),
                                      torch.optim.SGD(model.parameters(), lr=0.1))
    outputs = [training(*batch()) for _ in range(calls)]
    return training, outputs, before, model


def test_a_timing_only_run_simulates_exactly_what_a_full_run_does():
    full, full_out, _, _ = run(False)
    fake, fake_out, before, model = run(True)
    pd.testing.assert_frame_equal(fake.timeline.events, full.timeline.events)
    assert fake.cycleCount() == full.cycleCount() > 0
    assert fake.getLatency() == full.getLatency()
    # PopTorch's shapes and dtypes, NaN where a full run has numbers.
    for real, placeholder in zip(full_out[-1], fake_out[-1]):
        assert placeholder.shape == real.shape and placeholder.dtype == real.dtype
        assert torch.isnan(placeholder).all() and not torch.isnan(real).any()
    # The weights are not updated, nor do gradients appear on them.
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(p.grad is None for p in model.parameters())


def test_the_environment_turns_timing_only_on(monkeypatch):
    monkeypatch.setenv("IPUSIM_TIMING_ONLY", "1")
    training, outputs, _, _ = run(False, calls=1)
    assert torch.isnan(outputs[0][0]).all()
    monkeypatch.setenv("IPUSIM_TIMING_ONLY", "0")
    assert not poptorch.Options().Simulation.runs_timing_only


def test_ipusim_run_timing_only_reaches_the_script(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import torch, poptorch
        model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
        print("nan" if torch.isnan(model(torch.ones(3, 4))).all() else "numbers")
    """))
    out = [subprocess.run([sys.executable, "-m", "poptorch_shim.commands", "run", *flags,
                           str(script)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
           for flags in (["--timing-only", "--no-progress"], ["--no-progress"])]
    assert [o.stdout.strip() for o in out] == ["nan", "numbers"], [o.stderr for o in out]


def test_timing_only_measures_a_staged_model_stage_by_stage():
    class Staged(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(4))

        def forward(self, x, target=None):
            for i, layer in enumerate(self.layers):
                with Block(f"B{i}"):   # every operation in a Block, as PopTorch requires
                    x = poptorch.recomputationCheckpoint(torch.relu(layer(x)))
                    if i == len(self.layers) - 1 and target is not None:
                        return x, nn.functional.mse_loss(x, target)
            return x

    def staged_run(timing_only):
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(8)
        opts.setExecutionStrategy(PipelinedExecution("B0", "B1", "B2", "B3"))
        opts.Simulation.timingOnly(timing_only)
        torch.manual_seed(0)
        model = Staged()
        training = poptorch.trainingModel(model, opts)
        training(torch.randn(8 * 2, 32), torch.randn(8 * 2, 32))
        return training

    full, fake = staged_run(False), staged_run(True)
    assert fake.device.work == full.device.work
    assert all(stage.checkpoint_bytes == 2 * 32 * 4 for stage in full.device.work.stages)
    pd.testing.assert_frame_equal(fake.timeline.events, full.timeline.events)


def test_measuring_on_fake_tensors_costs_what_real_tensors_do():
    model, (x, labels) = SmallCNN(), batch(4)
    twin = copy.deepcopy(model)
    with measure() as real:
        model(x, labels)[1].backward()
    with fake_inputs((x, labels)) as (fx, flabels), measure() as fake:
        twin(fx, flabels)[1].backward()
    assert fake.cost == real.cost
    figures = ("saved_bytes", "checkpoint_bytes", "segment_bytes")
    assert [getattr(fake.saved, f) for f in figures] == [getattr(real.saved, f) for f in figures]


def test_the_model_dtype_is_the_precision_it_is_priced_at():
    def compute_us(dtype, partials=None):
        opts = poptorch.Options()
        opts.Simulation.timingOnly(True)
        if partials is not None:
            opts.Precision.setPartialsType(partials)
        model = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 1024)).to(dtype)
        inference = poptorch.inferenceModel(model, opts)
        inference(torch.randn(4096, 1024, dtype=dtype))
        stage = inference.device.work.stages[0]
        widths = {k.width for k, _ in stage.forward.kernels if k.kind is KernelKind.MATMUL}
        events = inference.timeline.events
        busy = events[events["kind"] == "forward"]
        return widths, float((busy["end_ps"] - busy["start_ps"]).sum())

    (w32, fp32), (w16, fp16) = compute_us(torch.float32), compute_us(torch.float16)
    _, half_partials = compute_us(torch.float16, torch.float16)
    assert (w32, w16) == ({4}, {2})
    assert fp16 < fp32 / 1.5                  # the 16-bit peak is four times the fp32 one
    assert half_partials < fp16               # fp32 partials use half the conv units on Mk2


def test_autocast_is_priced_in_the_dtype_it_computes_in():
    model = nn.Linear(256, 256)
    x = torch.randn(64, 256)
    with torch.autocast("cpu", dtype=torch.bfloat16), measure() as result:
        model(x)
    assert {k.width for k, _ in result.cost.kernels if k.kind is KernelKind.MATMUL} == {2}


def test_recomputation_keeps_checkpoints_instead_of_the_stash():
    def compiled(recompute: bool):
        opts = options(True)
        if recompute:
            opts._Popart.set("autoRecomputation", int(poptorch.RecomputationType.RecomputeAll))
        training, _, _, _ = run(True, calls=1, opts=opts)
        return training

    plain, recomputed = compiled(False), compiled(True)
    stage = plain.device.work.stages[0]
    assert 0 < stage.checkpoint_bytes and stage.segment_stash_bytes < stage.stash_bytes
    assert recomputed.device.memory["stash"][0] == stage.checkpoint_bytes + \
        stage.segment_stash_bytes < plain.device.memory["stash"][0]
    kinds = recomputed.timeline.events["kind"].value_counts()
    micro_batches = 2 * 3 * 2  # iterations x accumulation x replicas
    assert kinds["recompute"] == kinds["forward"] == micro_batches
    assert "recompute" not in plain.timeline.events["kind"].values
    assert recomputed.timeline.duration_ps > plain.timeline.duration_ps


def test_a_block_less_model_stashes_activations_not_weights():
    """Autograd saves the weights of a Linear for its backward; the IPU holds
    them as weights, so a single-stage model's stash counts only activations,
    as the same model inside one Block does."""
    model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(4)])
    x = torch.randn(8, 256)
    with measure() as result:
        model(x).sum().backward()
    activations = 4 * 8 * 256 * 4  # each layer's input
    assert result.saved.saved_bytes == activations


def test_sharding_the_optimizer_state_divides_it_across_replicas():
    def compiled(sharded: bool):
        opts = options(True)
        opts.TensorLocations.setOptimizerLocation(
            poptorch.TensorLocationSettings().useOnChipStorage(False)
            .useReplicatedTensorSharding(sharded))
        model = SmallCNN()
        training = poptorch.trainingModel(
            model, opts, torch.optim.Adam(model.parameters()))
        training(*batch())
        return training

    plain, sharded = compiled(False), compiled(True)
    def streamed(training):
        events = training.timeline.events
        return events[events["kind"] == "stream_in"]["bytes"].sum()
    assert streamed(sharded) == pytest.approx(streamed(plain) / 2, rel=0.01)
    assert plain.device.memory["optimizer"][0] == sharded.device.memory["optimizer"][0] == 0


class OverlappedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))

    def forward(self, x):
        x = poptorch.set_overlap_for_input(x, poptorch.OverlapMode.OverlapAccumulationLoop)
        return poptorch.set_overlap_for_output(self.layers(x),
                                               poptorch.OverlapMode.OverlapAccumulationLoop)


def test_overlapped_io_needs_io_tiles_and_streams_on_them():
    torch.manual_seed(0)
    model, x = OverlappedMLP(), torch.randn(4 * 8, 64)
    opts = poptorch.Options()
    opts.deviceIterations(4)
    with pytest.raises(RuntimeError, match="No IO tiles allocated.*numIOTiles"):
        poptorch.inferenceModel(model, opts)(x)
    opts = poptorch.Options()
    opts.deviceIterations(4)
    opts.TensorLocations.numIOTiles(32)
    inference = poptorch.inferenceModel(model, opts)
    assert torch.equal(inference(x), model(x))
    run = inference.device.run
    assert run.overlap_inputs and run.overlap_outputs and run.io_tiles == 32
    kinds = inference.timeline.events["kind"].value_counts()
    assert kinds["io_tiles_copy"] == 4 + 4  # each input in, each output out
    assert kinds["host_to_device"] == kinds["device_to_host"] == 0


def test_overlapping_the_outputs_leaves_the_inputs_synchronous():
    class OutputsOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(64, 64)

        def forward(self, x):
            return poptorch.set_overlap_for_output(self.layer(x),
                                                   poptorch.OverlapMode.OverlapAccumulationLoop)

    opts = poptorch.Options()
    opts.deviceIterations(4)
    opts.TensorLocations.numIOTiles(32)
    inference = poptorch.inferenceModel(OutputsOnly(), opts)
    inference(torch.randn(4 * 8, 64))
    run, events = inference.device.run, inference.timeline.events
    assert (run.overlap_inputs, run.overlap_outputs) == (False, True)
    kinds = events["kind"].value_counts()
    assert kinds["host_to_device"] == 4 and kinds["io_tiles_copy"] == 4
    copies = events[events["kind"] == "io_tiles_copy"]
    assert (copies["bytes"] == 8 * 64 * 4).all()  # the outputs only


def test_a_new_input_shape_is_refused_with_both_shapes():
    inference = poptorch.inferenceModel(nn.Linear(64, 8))
    inference(torch.randn(2, 4, 64))
    inference(torch.randn(2, 4, 64))  # the same signature runs again
    with pytest.raises(ValueError, match=r"\[2, 4000, 64\] float32.*compiled for "
                                         r"\(\[2, 4, 64\] float32\)"):
        inference(torch.randn(2, 4000, 64))
    with pytest.raises(ValueError, match=r"\[2, 4, 64\] float16"):
        inference(torch.randn(2, 4, 64).half())


def test_keyword_arguments_in_another_order_are_the_same_inputs():
    class TwoInputs(nn.Module):
        def forward(self, x, z):
            return x + z

    inference = poptorch.inferenceModel(TwoInputs())
    x, z = torch.ones(2, 3), torch.zeros(2, 3)
    assert torch.equal(inference(x=x, z=z), inference(z=z, x=x))


def test_a_model_without_blocks_needs_the_memory_of_the_same_model_in_one_block():
    class Summed(nn.Module):
        def __init__(self, layers, block: bool):
            super().__init__()
            self.layers, self.block = layers, block

        def forward(self, x):
            if not self.block:
                return self.layers(x).sum()
            with Block("only", ipu_id=0):
                return self.layers(x).sum()

    def memory(model):
        opts = poptorch.Options()
        opts.Simulation.timingOnly(True)
        training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
        training(torch.randn(8, 512))
        return training.device.memory.iloc[0]

    torch.manual_seed(0)
    layers = nn.Sequential(*[nn.Linear(512, 512) for _ in range(8)])
    plain = memory(Summed(copy.deepcopy(layers), block=False))
    in_a_block = memory(Summed(copy.deepcopy(layers), block=True))
    for part in ("weights", "optimizer", "stash", "total"):
        assert plain[part] == pytest.approx(in_a_block[part], rel=0.01), part
    assert plain["stash"] < plain["weights"] / 10  # activations of a batch of 8, not weights


def test_fused_attention_is_priced_as_its_matmuls_and_softmax():
    """F.scaled_dot_product_attention runs as one fused aten op on the CPU;
    the IPU runs it as Q K^T, a softmax and a product with V."""
    def attention(fused: bool):
        def run(q):
            if fused:
                return nn.functional.scaled_dot_product_attention(q, q, q)
            scores = q @ q.transpose(-1, -2) / q.shape[-1] ** 0.5
            return torch.softmax(scores, dim=-1) @ q
        q = torch.randn(8, 16, 128, 64, requires_grad=True)
        with measure() as forward:
            out = run(q)
        with measure() as backward:
            out.sum().backward()
        return forward.cost, backward.cost

    (fused, fused_back), (written, _) = attention(True), attention(False)
    matmuls = [k for k, _ in fused.kernels if k.kind is KernelKind.MATMUL]
    # Q K^T is (128 x 64) @ (64 x 128) per batch and head, then P V is (128 x 128) @ (128 x 64).
    assert [(k.groups, k.m, k.k, k.n) for k in matmuls] == [(128, 128, 64, 128),
                                                             (128, 128, 128, 64)]
    assert fused.flops == written.flops == 2 * 2 * 128 * 128 * 64 * 128
    assert sum(c for k, c in fused_back.kernels if k.kind is KernelKind.MATMUL) == 5
    assert CALIBRATED_MK2.compute_ps(fused, MK2_GC200) > \
        0.5 * CALIBRATED_MK2.compute_ps(written, MK2_GC200)


def test_an_embedding_moves_the_rows_it_reads_not_its_table():
    table, indices = nn.Embedding(30000, 1024), torch.randint(0, 30000, (8, 128))
    with measure() as result:
        table(indices)
    (kernel, _), = result.cost.kernels
    assert kernel.kind is KernelKind.GATHER and kernel.elements == 8 * 128 * 1024
    assert (kernel.m, kernel.n) == (8 * 128, 1024)   # a multi-slice of 1,024 rows of 1,024
    assert kernel.bytes < 30000 * 1024 * 4 / 10


def test_an_embedding_gradient_zeroes_its_dense_table_then_adds_the_rows():
    table, indices = nn.Embedding(3000, 64), torch.randint(0, 3000, (8, 16))
    rows = table(indices)
    with measure() as result:
        rows.sum().backward()
    kernels = [kernel for kernel, _ in result.cost.kernels]
    assert any(k.kind is KernelKind.ELEMENTWISE and k.elements == 3000 * 64   # the zeroed table
               for k in kernels)
    assert [(k.m, k.n) for k in kernels if k.kind is KernelKind.GATHER] == [(8 * 16, 64)]


def test_a_backward_matmul_regroups_its_smaller_operand():
    layer, x = nn.Linear(256, 64), torch.randn(32, 256)
    with measure() as forward:
        y = layer(x)
    with measure() as backward:
        y.sum().backward()
    assert all(k.regroup == 0 for k, _ in forward.cost.kernels)
    products = [k for k, _ in backward.cost.kernels if k.kind is KernelKind.MATMUL]
    assert products and all(k.regroup == k.groups * min(k.m, k.n) * k.k * k.width
                            for k in products)


def test_an_untraceable_model_keeps_its_checkpoints():
    """A data-dependent branch makes torch.fx give up and the model run
    eagerly; its recomputation memory is that of the same model traced."""
    import warnings

    class Checkpointed(nn.Module):
        def __init__(self, untraceable: bool):
            super().__init__()
            self.untraceable = untraceable
            self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(4))
            self.head = nn.Linear(64, 4)

        def forward(self, x, y):
            with Block("A", ipu_id=0):
                for layer in self.layers:
                    x = poptorch.recomputationCheckpoint(torch.tanh(layer(x)))
                if self.untraceable and bool(x.sum() > -1e9):
                    x = x * 1.0
            with Block("B", ipu_id=1):
                out = self.head(x)
                return out, nn.functional.cross_entropy(out, y)

    def stash(untraceable: bool):
        torch.manual_seed(0)
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(4)
        opts._Popart.set("autoRecomputation", int(poptorch.RecomputationType.Pipeline))
        training = poptorch.trainingModel(Checkpointed(untraceable), opts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the eager fallback says so
            training(torch.randn(4 * 8, 64), torch.randint(0, 4, (4 * 8,)))
        first = training.device.work.stages[0]
        return (first.checkpoint_bytes, first.segment_stash_bytes,
                list(training.device.memory["stash"]))

    assert stash(True) == stash(False)
    assert stash(False)[0] == 4 * 8 * 64 * 4  # four checkpoints of a micro-batch of 8


def test_a_model_that_needs_its_data_is_a_clear_error_in_timing_only_runs():
    class Masked(nn.Module):
        def forward(self, x):
            return x[x > 0].sum()

    opts = poptorch.Options()
    opts.Simulation.timingOnly(True)
    with pytest.raises(RuntimeError, match="needs the values of its tensors.*timingOnly"):
        poptorch.inferenceModel(Masked(), opts)(torch.randn(4, 8))
    assert torch.isfinite(poptorch.inferenceModel(Masked())(torch.randn(4, 8))).all()


@pytest.mark.parametrize("module, shape", [
    (nn.Conv2d(8, 4, 3, padding=1), (2, 8, 16, 16)),
    (nn.Conv2d(8, 8, 3, groups=8), (2, 8, 16, 16)),          # depthwise
    (nn.Conv1d(6, 12, 5, stride=2, groups=3), (2, 6, 40)),
    (nn.ConvTranspose2d(8, 4, 2, stride=2), (2, 8, 16, 16)),
    (nn.Linear(32, 48), (4, 10, 32))])                         # a 3-D input
def test_the_matmul_kernels_do_the_multiply_accumulates_torch_counts(module, shape):
    """Each matmul kernel's groups x m x k x n is the operator's MACs, as
    torch's FLOP counter has them (FLOPs / 2), padding to the AMP aside."""
    x = torch.randn(*shape)
    with torch.no_grad(), measure() as result:
        module(x)
    macs = sum(c * k.groups * k.m * k.k * k.n for k, c in result.cost.kernels
               if k.kind is KernelKind.MATMUL)
    assert macs == result.cost.flops / 2 > 0


def test_pooling_norms_and_softmax_are_recorded_as_popnn_runs_them():
    """Max pooling, a group norm and a log-softmax, forward and backward, reach the
    cost model as popnn's operators: the pool by its output rows, row width and kernel
    positions, its gradient behind a copy of the incoming gradient."""
    conv_out = torch.randn(2, 5, 12, 12, requires_grad=True)
    with measure() as forward:
        pooled = nn.functional.max_pool2d(conv_out, 2)
        normed = nn.functional.group_norm(pooled, 1)
        out = torch.log_softmax(normed.flatten(1), dim=-1)
    with measure() as backward:
        out.sum().backward()
    kinds = [k.kind for k, _ in forward.cost.kernels]
    assert {KernelKind.POOL, KernelKind.NORMALISE, KernelKind.SOFTMAX} <= set(kinds)
    pool = next(k for k, _ in forward.cost.kernels if k.kind is KernelKind.POOL)
    assert (pool.m, pool.n, pool.k) == (2 * 5 * 6, 6, 4)
    back = [k.kind for k, _ in backward.cost.kernels]
    assert {KernelKind.POOL_GRAD, KernelKind.NORMALISE_GRAD, KernelKind.SOFTMAX_GRAD} <= set(back)
    assert back.index(KernelKind.DATA) < back.index(KernelKind.POOL_GRAD)


class Untraceable(nn.Module):
    """What stops torch.fx in Hugging Face's models without needing any data (a
    loop over a shape), with real buffers updated in place (BatchNorm's
    statistics, a step counter) and a weight shared by two blocks' modules."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(8, 8), nn.Linear(8, 8)
        self.second.weight = self.first.weight
        self.norm = nn.BatchNorm1d(8)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x, y):
        with Block("A", ipu_id=0):
            self.steps.add_(1)
            for _ in range(x.shape[1] // 8):  # a Proxy is no int: torch.fx gives up
                x = torch.relu(self.norm(self.first(x)))
        with Block("B", ipu_id=1):
            out = self.second(x)
            return out, nn.functional.mse_loss(out, y)


def test_timing_only_measures_a_model_torch_fx_cannot_trace():
    import warnings

    def train(timing_only: bool):
        torch.manual_seed(0)
        model, opts = Untraceable(), poptorch.Options()
        opts.Training.gradientAccumulation(4)
        opts.Simulation.timingOnly(timing_only)
        before = copy.deepcopy(model.state_dict())
        training = poptorch.trainingModel(model, opts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the eager fallback says so
            training(torch.randn(4 * 2, 8), torch.randn(4 * 2, 8))
        return training, model, before

    full, trained, _ = train(False)
    fake, untouched, before = train(True)
    pd.testing.assert_frame_equal(fake.timeline.events, full.timeline.events)
    assert [s.weight_bytes for s in fake.device.work.stages] == [(64 + 8) * 4 + 16 * 4, 8 * 4]
    for key, value in untouched.state_dict().items():  # nothing computed, nothing changed
        assert torch.equal(value, before[key]), key
    assert all(p.grad is None for p in untouched.parameters())
    assert int(trained.steps) == 4  # one in-place update per micro-batch, none for measuring
    assert untouched.second.weight is untouched.first.weight


def test_a_training_dropout_is_poprands_one_operator_with_the_same_numbers():
    """PopART lowers dropout to poprand's dropout (the mask drawn and applied in one
    vertex); its CPU form's Bernoulli draw, scale and multiply are not three IPU
    operators. The numbers are torch's own."""
    model = nn.Sequential(nn.Linear(32, 32), nn.Dropout(0.25))
    x = torch.randn(8, 32)
    torch.manual_seed(3)
    expected = model(x)
    torch.manual_seed(3)
    with measure() as forward:
        got = model(x)
    assert torch.equal(got, expected)
    kinds = [kernel.kind for kernel, _ in forward.cost.kernels]
    assert kinds == [KernelKind.MATMUL, KernelKind.DROPOUT]
    dropout = forward.cost.kernels[1][0]
    assert dropout.elements == 8 * 32 and dropout.width == 4
    with measure() as in_place:   # in place, the same operator
        torch.nn.functional.dropout(x.clone(), 0.5, training=True, inplace=True)
    assert [kernel.kind for kernel, _ in in_place.cost.kernels] == [KernelKind.DROPOUT]
    model.eval()   # inference: dropout is the identity, no operator
    with measure() as inference:
        model(x)
    assert [kernel.kind for kernel, _ in inference.cost.kernels] == [KernelKind.MATMUL]
    # on fake tensors, as a timing-only run measures, the same operator
    with fake_inputs((x,)) as (fx,), measure() as faked:
        model.train()(fx)
    assert [kernel.kind for kernel, _ in faked.cost.kernels] == kinds
