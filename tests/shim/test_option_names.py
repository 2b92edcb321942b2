"""The shim's one table from ipusim's names to PopTorch's option calls.

Everything the shim writes about a run's settings takes PopTorch's words from
``poptorch_shim/_core/option_names.py``: the reports' advice, the errors of
the run configuration, the sweep's keys and the advisor's. The words stay
what PopTorch users read before the table existed.
"""
import ast
from pathlib import Path

import poptorch_shim
from poptorch_shim._core import option_names
from poptorch_shim._core.option_names import ERROR_NAMES, REPORT_NAMES, sweep_key
from poptorch_shim._execution import engine_config
from poptorch_shim.sweep import advisor


def test_the_table_imports_nothing_of_the_shims_other_packages():
    tree = ast.parse(Path(option_names.__file__).read_text(encoding="utf-8"))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)]
    shim = [name for name in imported if name.split(".")[0] == "poptorch_shim"]
    assert all(name.startswith("poptorch_shim._core") for name in shim), shim


def test_the_run_configurations_errors_name_poptorchs_options_as_before():
    assert dict(ERROR_NAMES) == {
        "gradient_accumulation": "poptorch.Options().Training.gradientAccumulation",
        "device_iterations": "poptorch.Options().deviceIterations",
        "replicas": "poptorch.Options().replicationFactor",
        "pipelined": "poptorch.PipelinedExecution",
    }
    assert engine_config.NO_IO_TILES_ERR == (
        "No IO tiles allocated. You must allocate at least 32 IO tiles using "
        "poptorch.Options().TensorLocations.numIOTiles, or leave out "
        "poptorch.set_overlap_for_input and set_overlap_for_output.")


def test_each_word_is_a_call_poptorch_options_has():
    options = poptorch_shim.Options()
    for setting, option in option_names.OPTION_CALLS.items():
        target = options
        for part in option.call.split("."):
            target = getattr(target, part)
        assert callable(target), setting
    assert REPORT_NAMES.word("gradient_accumulation") == "opts.Training.gradientAccumulation"
    assert REPORT_NAMES.word("device_iterations") == "opts.deviceIterations"
    assert REPORT_NAMES.word("replicas") == "opts.replicationFactor"
    assert REPORT_NAMES.column("gradient_accumulation") == "Training.gradientAccumulation"


def test_the_advisor_searches_by_the_tables_sweep_keys():
    assert (advisor.REPLICAS, advisor.ACCUMULATION, advisor.DEVICE_ITERATIONS) == (
        "replicationFactor", "Training.gradientAccumulation", "deviceIterations")
    assert sweep_key("system") == advisor.SYSTEM == "Simulation.system"
    assert advisor.OPTIMIZER_LOCATION == "TensorLocations.setOptimizerLocation"
