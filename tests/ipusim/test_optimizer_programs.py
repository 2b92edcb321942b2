"""The weight update as PopART decomposes each optimizer: its operators per weight
tensor, what they read and write, and what they cost."""
from __future__ import annotations

from dataclasses import replace

import pytest

import ipusim
from ipusim import Cost, Kernel, KernelKind, RunConfig, Stage, Work, simulate, system_spec
from ipusim.cost import optimizer
from ipusim.cost.cost_model import CALIBRATED_MK2
from ipusim.plan.engine_plan import EnginePlan


def traffic(program: optimizer.UpdateProgram, accumulating: bool = False) -> tuple[int, int]:
    """Full-size tensors read and written a step, per weight tensor (the scalar
    operators, the learning rate's negation, aside)."""
    ops = [op for op in program.step_ops(accumulating) if not op.scalar]
    return sum(op.reads for op in ops), sum(op.writes for op in ops)


@pytest.mark.parametrize("program,reads_writes", [
    (optimizer.sgd(), (3, 2)),                                   # SGD0: scale, then w -= lr g
    (optimizer.sgd(momentum=True), (5, 3)),                      # SGD2, PopTorch's default
    (optimizer.sgd(momentum=True, weight_decay=True), (7, 4)),
    (optimizer.sgd(momentum=True, combined=True), (5, 3)),       # SGD1
    (optimizer.adam(), (10, 5)),                                 # with its L2 add, always there
    (optimizer.adam(decoupled=True), (9, 4)),                    # AdamW: the updater reads w
    (optimizer.adam(lamb=True), (11, 4)),                        # LAMB: AdamW and two norms
    (optimizer.rmsprop(), (8, 4)),
])
def test_each_optimizer_reads_and_writes_what_poparts_decomposition_does(program, reads_writes):
    assert traffic(program) == reads_writes


def test_a_fused_expression_costs_its_inputs_times_its_operations():
    """popops' generated map codelet: inputs x operations cycles a vector, counted in
    passes of a built-in vertex's 3 (ExpressionGenerator.cpp:320-335)."""
    updater = next(op for op in optimizer.adam().ops if op.name == "Adam updater")
    assert (updater.reads, updater.operations, updater.passes) == (2, 9, 6)
    assert next(op for op in optimizer.adam(decoupled=True).ops
                if op.name == "Adam updater").passes == 11   # 3 inputs, 11 operations
    assert all(op.passes == 1 for op in optimizer.sgd(momentum=True).ops)


def test_the_accumulators_add_runs_each_micro_batch_only_when_accumulating():
    sgd2 = optimizer.sgd(momentum=True)
    assert sgd2.micro_batch_ops(accumulating=False) == ()
    assert [op.name for op in sgd2.micro_batch_ops(accumulating=True)] == ["accumulate gradient"]
    assert "accumulate gradient" not in [op.name for op in sgd2.step_ops(True)]
    # and once a step the update has read the accumulator, it is zeroed
    assert "zero accumulator" in [op.name for op in sgd2.step_ops(accumulating=True)]
    assert "zero accumulator" not in [op.name for op in sgd2.step_ops(accumulating=False)]
    assert traffic(sgd2, accumulating=True) == (5, 4)
    # SGD1 accumulates into its velocity: its dampened add moves into each micro-batch.
    sgd1 = optimizer.sgd(momentum=True, combined=True)
    dampened = "SGD1 dampened gradient into velocity"
    assert dampened in [op.name for op in sgd1.step_ops(accumulating=False)]
    assert [op.name for op in sgd1.micro_batch_ops(accumulating=True)] == [dampened]
    assert dampened not in [op.name for op in sgd1.step_ops(accumulating=True)]


def measured_stage(weight_bytes: int = 64 << 20, tensors: int = 10) -> Stage:
    forward = Cost(kernels=((Kernel(KernelKind.MATMUL, 4, m=64, k=64, n=64), 1),))
    return Stage("s", forward=forward, weight_bytes=weight_bytes, weight_tensors=tensors)


def test_richer_optimizers_cost_more_on_the_same_weights():
    stage, ipu = measured_stage(), ipusim.MK2_GC200
    cost = {name: CALIBRATED_MK2.compute_ps(program.update_cost(stage), ipu)
            for name, program in (("SGD", optimizer.sgd()),
                                  ("SGD momentum", optimizer.sgd(momentum=True)),
                                  ("AdamW", optimizer.adam(decoupled=True)),
                                  ("LAMB", optimizer.adam(lamb=True)))}
    assert cost["SGD"] < cost["SGD momentum"] < cost["AdamW"] < cost["LAMB"]


def test_lambs_norms_each_add_a_reduction_across_the_tiles():
    stage = measured_stage(tensors=4)
    lamb = optimizer.adam(lamb=True).update_cost(stage)
    adamw = optimizer.adam(decoupled=True).update_cost(stage)
    # Each norm is a pass on the tiles and a second compute set across them, per tensor.
    lamb_sets = sum(count for kernel, count in lamb.kernels)
    adamw_sets = sum(count for kernel, count in adamw.kernels)
    assert lamb_sets - adamw_sets == 4 * 2 * 2


def test_half_weights_with_float_state_move_each_tensor_in_its_own_type():
    program = optimizer.adam(weight_width=2, lamb=True)
    stage = measured_stage(weight_bytes=2 * 1000, tensors=1)   # 1,000 half weights
    update = program.update_cost(stage)
    by_op = {kernel.op: kernel for kernel, _ in update.kernels}
    assert by_op["Adam weight update"].width == 2 and by_op["first moment"].width == 4
    # and the learning rate's negation, one fp32 element read and written
    assert update.bytes == 1000 * program.bytes_per_element(program.step_ops(False)) + 8


def test_gradient_accumulation_adds_the_accumulators_add_to_every_backward():
    stage = replace(measured_stage(), backward=Cost(time_ps=10**6))
    work, spec = Work((stage,)), system_spec("mk2", 1)
    run = RunConfig(gradient_accumulation=4, synthetic_data=True,
                    optimizer=optimizer.sgd(momentum=True))
    plan = EnginePlan.build(work, run, spec, CALIBRATED_MK2)
    prices = plan.prices[0]
    add = CALIBRATED_MK2.compute_ps(run.optimizer.accumulate_cost(stage, True),
                                    spec.ipu)
    assert prices.accumulate_ps == add > 0
    assert prices.backward_ps == 10**6 + add
    # and the simulated call holds it four times, once per micro-batch, and the
    # accumulators' zeroing once
    once = simulate(work, replace(run, gradient_accumulation=1), spec, CALIBRATED_MK2)
    four = simulate(work, run, spec, CALIBRATED_MK2)
    forward = CALIBRATED_MK2.compute_ps(stage.forward, spec.ipu)
    zeroing = prices.update_ps - CALIBRATED_MK2.compute_ps(
        run.optimizer.update_cost(stage, accumulating=False), spec.ipu)
    assert zeroing > 0
    assert four.duration_ps - once.duration_ps == 3 * (forward + 10**6) + 4 * add + zeroing


def test_run_config_refuses_an_optimizer_that_is_not_a_program():
    with pytest.raises(ValueError, match="RunConfig.optimizer must be a UpdateProgram"):
        RunConfig(optimizer="LAMB")
