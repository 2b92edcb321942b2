"""Bad input fails at once with a ValueError that names the option and shows its value."""
import re

import pytest

from ipusim import (
    Cost,
    CostModel,
    Execution,
    RunConfig,
    Simulation,
    Stage,
    SystemSpec,
    Work,
    simulate,
    system_spec,
)
from ipusim.plan.run_config import PipelineTooShallow, SettingError

ONE_STAGE = Work((Stage("model", 0, Cost(time_ps=10)),))


def stages_on(*ipus: int) -> Work:
    return Work(tuple(Stage(f"s{k}", ipu, Cost(time_ps=10)) for k, ipu in enumerate(ipus)))


@pytest.mark.parametrize("build,message", [
    (lambda: RunConfig(replicas=0), "replicas must be a positive integer, got 0"),
    (lambda: RunConfig(replicas=-2), "replicas must be a positive integer, got -2"),
    (lambda: RunConfig(replicas=1.5), "replicas must be a positive integer, got 1.5"),
    (lambda: RunConfig(replicas=True), "replicas must be a positive integer, got True"),
    (lambda: RunConfig(device_iterations=0), "device_iterations must be a positive integer, got 0"),
    (lambda: RunConfig(gradient_accumulation=0),
     "gradient_accumulation must be a positive integer, got 0"),
    (lambda: RunConfig(output_period=-1), "output_period must be a non-negative integer, got -1"),
    (lambda: Work((Stage("m"),), micro_batch_size=0),
     "micro_batch_size must be a positive integer, got 0"),
    (lambda: Work((Stage("m"),), micro_batch_size=True),
     "micro_batch_size must be a positive integer, got True"),
    (lambda: SystemSpec(num_ipus=0), "SystemSpec.num_ipus must be a positive integer, got 0"),
    (lambda: SystemSpec(num_ipus=True), "SystemSpec.num_ipus must be a positive integer, got True"),
    (lambda: system_spec("mk2", -1), "SystemSpec.num_ipus must be a positive integer, got -1"),
    (lambda: SystemSpec(host_link_bandwidth=0),
     "SystemSpec.host_link_bandwidth must be positive, got 0"),
])
def test_non_positive_counts(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


@pytest.mark.parametrize("build,message", [
    (lambda: Cost(flops=-1.0), "Cost.flops must not be negative, got -1.0"),
    (lambda: Cost(bytes=-8), "Cost.bytes must not be negative, got -8"),
    (lambda: Cost(ops=-1), "Cost.ops must not be negative, got -1"),
    (lambda: Cost(time_ps=-5), "Cost.time_ps must not be negative, got -5"),
    (lambda: Stage("s", activation_bytes=-1),
     "Stage 's': activation_bytes must not be negative, got -1"),
    (lambda: Stage("s", stash_bytes=-1), "Stage 's': stash_bytes must not be negative, got -1"),
    (lambda: Stage("s", weight_bytes=-3), "Stage 's': weight_bytes must not be negative, got -3"),
    (lambda: Stage("s", optimizer_bytes=-3),
     "Stage 's': optimizer_bytes must not be negative, got -3"),
    (lambda: Stage("s", ipu=-1), "Stage 's': ipu must be a non-negative integer, got -1"),
    (lambda: Work((Stage("m"),), input_bytes_per_sample=-1),
     "input_bytes_per_sample must not be negative, got -1"),
    (lambda: Work((Stage("m"),), output_bytes_per_sample=-1),
     "output_bytes_per_sample must not be negative, got -1"),
    (lambda: Work(()), "Work needs at least one stage, got none"),
    (lambda: CostModel(host_sync_ps=-1), "CostModel.host_sync_ps must not be negative, got -1"),
    (lambda: CostModel(engine_run_ps=-1),
     "CostModel.engine_run_ps must not be negative, got -1"),
    (lambda: CostModel(available_memory_proportion=1.5),
     "CostModel.available_memory_proportion must be in (0, 1], got 1.5"),
    (lambda: CostModel(flops_efficiency=0), "CostModel.flops_efficiency must be in (0, 1], got 0"),
    (lambda: CostModel(ipu_link_efficiency=1.5),
     "CostModel.ipu_link_efficiency must be in (0, 1], got 1.5"),
    (lambda: CostModel(precision="fp64"),
     "CostModel.precision must be 'fp32' or 'fp16', got 'fp64'"),
])
def test_negative_costs_and_bytes(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


def test_replicas_that_do_not_fit_the_ipus():
    with pytest.raises(ValueError, match=re.escape(
            "replicas=3 x 2 IPU(s) per replica needs 6 IPUs but the system has num_ipus=4")):
        simulate(stages_on(0, 1), RunConfig(replicas=3), system_spec("mk2", 4))


def test_a_stage_on_a_missing_ipu():
    with pytest.raises(ValueError, match=re.escape(
            "Stage 's2' is placed on IPU 3 but the system has num_ipus=2 (IPUs 0..1)")):
        Simulation(stages_on(0, 1, 3), RunConfig(), system_spec("mk2", 2))


@pytest.mark.parametrize("ipus,accumulation,needed", [((0, 1), 2, 3), ((0, 1, 2, 3), 6, 7),
                                                      ((0, 0, 1), 1, 3)])
def test_pipelined_training_needs_accumulation_of_at_least_2f_minus_1(ipus, accumulation, needed):
    run = RunConfig(gradient_accumulation=accumulation, execution=Execution.PIPELINED)
    with pytest.raises(ValueError) as caught:
        simulate(stages_on(*ipus), run, system_spec("mk2", 4))
    message = str(caught.value)
    assert "gradient_accumulation must be greater than or equal to the number of pipeline " \
           f"stages ({needed})" in message
    assert f"gradient_accumulation={accumulation}" in message


def test_pipelined_training_accepts_exactly_2f_minus_1():
    run = RunConfig(gradient_accumulation=7, execution=Execution.PIPELINED, synthetic_data=True)
    simulate(stages_on(0, 1, 2, 3), run, system_spec("mk2", 4))


def test_pipelined_inference_needs_device_iterations_of_at_least_f():
    run = RunConfig(training=False, device_iterations=3, execution=Execution.PIPELINED)
    with pytest.raises(ValueError, match=re.escape(
            "device_iterations must be greater than or equal to the number of pipeline stages (4) "
            "for pipelined inference, got device_iterations=3")):
        simulate(stages_on(0, 1, 2, 3), run, system_spec("mk2", 4))


def test_inference_with_gradient_accumulation():
    with pytest.raises(ValueError, match=re.escape(
            "gradient accumulation only applies to training, got gradient_accumulation=4")):
        RunConfig(training=False, gradient_accumulation=4)


def test_unknown_preset():
    with pytest.raises(ValueError, match=re.escape("Unknown IPU preset 'gc300'")):
        system_spec("gc300", 4)


@pytest.mark.parametrize("steps", [0, -1, 1.0])
def test_steps_must_be_a_positive_integer(steps):
    message = f"steps must be a positive integer, got {steps!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        simulate(ONE_STAGE, steps=steps)


def test_errors_come_before_any_simulated_time():
    sim = Simulation(ONE_STAGE, RunConfig(synthetic_data=True), system_spec("mk2", 1))
    with pytest.raises(ValueError):
        sim.run_steps(0)
    assert sim.system.now_ps == 0 and len(sim.recorder) == 0


@pytest.mark.parametrize("build, message", [
    (lambda: Cost(flops=float("nan")), "Cost.flops must not be negative, got nan"),
    (lambda: Cost(time_ps=float("inf")), "Cost.time_ps must be finite, got inf"),
    (lambda: Stage("s", weight_bytes=float("nan")), "Stage 's': weight_bytes must not be negative"),
    (lambda: CostModel(host_sync_ps=float("nan")),
     "CostModel.host_sync_ps must not be negative, got nan"),
    (lambda: CostModel(poptorch_call_ps=float("inf")),
     "CostModel.poptorch_call_ps must be finite, got inf"),
    (lambda: CostModel(ipu_link_efficiency=float("nan")),
     "CostModel.ipu_link_efficiency must be in (0, 1], got nan"),
])
def test_amounts_that_are_not_finite_numbers_are_refused(build, message):
    """NaN used to pass the checks (NaN < 0 is false) and shorten a step."""
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


@pytest.mark.parametrize("steps", [True, 0, -1, 1.5, float("nan"), "2"])
def test_a_design_point_refuses_a_bad_number_of_steps(steps):
    from ipusim.explore.design_point import DesignPoint
    with pytest.raises(ValueError, match=r"DesignPoint\.steps"):
        DesignPoint(ONE_STAGE, RunConfig(), SystemSpec(), CostModel(), steps)


@pytest.mark.parametrize("run, stages, setting, value, needed", [
    (RunConfig(gradient_accumulation=6, execution=Execution.PIPELINED), (0, 1, 2, 3),
     "gradient_accumulation", 6, 7),
    (RunConfig(training=False, device_iterations=3, execution=Execution.PIPELINED),
     (0, 1, 2, 3), "device_iterations", 3, 4),
    (RunConfig(replicas=3), (0, 1), "replicas", 3, 2),
    (RunConfig(), (0, 4), "num_ipus", 4, 5),
])
def test_a_refused_run_names_its_setting_the_value_and_the_bound(run, stages, setting, value,
                                                                 needed):
    with pytest.raises(SettingError) as caught:
        simulate(stages_on(*stages), run, system_spec("mk2", 4))
    error = caught.value
    assert (error.setting, error.value, error.needed) == (setting, value, needed)
    assert f"{setting}={value}" in str(error)
    assert isinstance(error, PipelineTooShallow) == (run.execution is Execution.PIPELINED)
