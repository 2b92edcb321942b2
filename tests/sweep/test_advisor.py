"""The advisor: the fastest configuration that fits, found exhaustively or with Optuna.

With SRAM tight enough that the fastest configuration overall does not fit,
the advisor must pick the fastest of those that do; the code it prints must
make the options it simulated.
"""
import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim.commands import main as ipusim_main
from poptorch_shim.sweep import InProcess, ModelSource
from poptorch_shim.sweep.advisor import advise, describe

THROUGHPUT = "throughput(items/s)"
TILES = 1472  # of a Mk2 IPU: the system's SRAM is set per tile


@pytest.fixture(scope="module")
def roomy():
    return advise(ModelSource(factory="sweep_models:pipelined"), ipus=8, system="mk2",
                  backend=InProcess())


def test_with_room_for_all_the_fastest_is_chosen(roomy):
    table = roomy.results
    assert roomy.searched == "exhaustive"
    valid = table[table["error"].isna()]
    assert valid["fits"].all()
    assert roomy.best[THROUGHPUT] == valid[THROUGHPUT].max()
    # The global batch (8 micro-batches of 4, one replica) is kept by every point.
    products = (table["replicationFactor"] * table["micro_batch"]
                * table["Training.gradientAccumulation"])
    assert (products == 32).all()


def test_the_fastest_that_fits_when_the_fastest_does_not(roomy):
    smallest, fastest = roomy.results["memory_max(MB)"].min(), roomy.best["memory_max(MB)"]
    assert smallest < fastest
    per_tile = int((smallest + fastest) / 2 * 1e6 / TILES)
    tight = advise(ModelSource(factory="sweep_models:pipelined",
                               kwargs={"sram_per_tile_bytes": per_tile}),
                   ipus=8, system="mk2", backend=InProcess())
    table = tight.results
    fitting = table[table["error"].isna() & table["fits"].fillna(False).astype(bool)]
    assert tight.best["fits"] and tight.best[THROUGHPUT] == fitting[THROUGHPUT].max()
    assert table.loc[~table["fits"].fillna(True).astype(bool), THROUGHPUT].max() \
        > tight.best[THROUGHPUT]
    # The printed code makes the chosen options.
    namespace = {"poptorch": poptorch, "torch": torch}
    exec(tight.code(), namespace)
    made = namespace["opts"]
    assert made.replication_factor == tight.settings["replicationFactor"]
    assert made.Training.gradient_accumulation == tight.settings["Training.gradientAccumulation"]
    assert f"sram_per_tile_bytes={per_tile}" in tight.code()  # a comment: ipusim's machine
    assert not any("Simulation" in line for line in tight.code().splitlines()
                   if not line.lstrip().startswith("#"))


def test_a_large_space_is_searched_with_optuna(roomy):
    searched = advise(ModelSource(factory="sweep_models:pipelined"), ipus=8, system="mk2",
                      backend=InProcess(), exhaustive_limit=4, trials=6, seed=1)
    assert searched.searched == "optuna"
    assert 1 <= len(searched.results) <= 6
    assert searched.best[THROUGHPUT] <= roomy.best[THROUGHPUT]
    valid = searched.results[searched.results["error"].isna()]
    assert searched.best[THROUGHPUT] == valid[THROUGHPUT].max()


def test_ipusim_advise_prints_the_code_and_the_runners_up(capsys):
    status = ipusim_main(["advise", "--ipus", "4", "--system", "bow", "--workers", "0",
                          "--no-progress", "--top", "3", "sweep_models:pipelined"])
    out = capsys.readouterr().out
    assert status == 0
    assert "Fastest that fits:" in out and "opts.Simulation.system('bow', 4)" in out
    assert "Runners-up:" in out


def test_the_scripts_own_configuration_is_ranked_among_those_tried(roomy):
    mine = roomy.results.iloc[roomy.yours]
    assert (mine["replicationFactor"], mine["micro_batch"],
            mine["Training.gradientAccumulation"]) == (1, 4, 8)  # as the script sets them
    assert roomy.your_rank == roomy.yours + 1
    # It is the searched point that runs as the script does (PopTorch's default
    # pipeline recomputation, the optimizer state on chip), not a copy of it.
    assert (mine["recomputation"], mine["TensorLocations.setOptimizerLocation"]) == \
        ("Pipeline", '{"useOnChipStorage": true}')  # as the results file keeps it
    assert not roomy.results["config"].duplicated().any()
    table = roomy.results
    same = (table["replicationFactor"] == 1) & (table["micro_batch"] == 4) \
        & (table["Training.gradientAccumulation"] == 8)
    assert same.sum() == 4  # recomputation on or off, the optimizer state on or off chip
    text = describe(roomy, 8, "mk2")
    fitting = int((roomy.results["error"].isna()
                   & roomy.results["fits"].fillna(False).astype(bool)).sum())
    slower = roomy.best[THROUGHPUT] / mine[THROUGHPUT]
    assert f"Yours: #{roomy.your_rank} of {fitting} that fit, {mine[THROUGHPUT]:,.0f} items/s" \
        in text
    assert (f"{slower:.1f}x slower than the best" in text) == (roomy.your_rank > 1)


def test_when_poptorch_refuses_every_configuration_the_advisor_says_why_not_memory():
    # A pipeline of 2 model stages trains 3 pipeline stages: an accumulation of 1 is refused
    # at every replica count and micro-batch that keeps the script's global batch.
    refused = advise(ModelSource(factory="sweep_models:pipelined", kwargs={"accumulation": 1}),
                     ipus=8, system="mk2", backend=InProcess())
    assert refused.settings is None and refused.results["error"].notna().all()
    text = describe(refused, 8, "mk2")
    assert "PopTorch refuses every configuration tried" in text
    assert "must be greater than or equal to the number of pipeline stages" in text
    assert "2F - 1" in text and "fits in memory" not in text
    assert "Yours: refused by PopTorch" in text
