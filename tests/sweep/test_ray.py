"""The sweep on a real local Ray cluster (2 CPUs): the local backend's results, exactly.

One cluster serves every test of the module (starting Ray takes seconds). It
is started here, so the backend uses it and leaves it running; the backend's
own start and shutdown are tested last (the sweep models come from
``sweep_models.py`` beside this file).
"""
import pandas as pd
import pytest

from poptorch_shim.commands import main as ipusim_main
from poptorch_shim.sweep import (
    InProcess,
    LocalProcesses,
    Measurements,
    ModelSource,
    RayCluster,
    SweepSpec,
    load,
    read_results,
    sweep,
)

pytestmark = [pytest.mark.slow]  # starts a local Ray cluster

ray = pytest.importorskip("ray")  # the ipusim[ray] extra, which scripts/test.sh installs

SPEC = SweepSpec(model=ModelSource(factory="sweep_models:pipelined"),
                 space={"replicationFactor": [1, 2, 4], "Training.gradientAccumulation": [2, 16],
                        "micro_batch": [4, 8]})


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_gives_exactly_the_local_backends_results(cluster, tmp_path, monkeypatch):
    puts = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value: puts.append(value) or real_put(value))
    measurements = Measurements(SPEC.model)
    on_ray = sweep(SPEC, tmp_path / "ray.parquet", RayCluster(), measurements=measurements)
    local = sweep(SPEC, tmp_path / "local.parquet", LocalProcesses(2))
    pd.testing.assert_frame_equal(on_ray, local)
    assert on_ray["error"].notna().sum() == 6 and on_ray["fits"].sum() == 6
    # Each measured work went to the object store once, not once per point.
    assert len(puts) == len(measurements) == 2
    assert ray.is_initialized()  # the cluster it did not start is left running


def test_an_interrupted_ray_sweep_resumes_without_recomputing(cluster, tmp_path):
    path, seen = tmp_path / "results.parquet", []

    def interrupt_after_two(row):
        seen.append(row["point_id"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(SPEC, path, RayCluster(), on_result=interrupt_after_two)
    resumed = []
    table = sweep(SPEC, path, RayCluster(), on_result=lambda row: resumed.append(row["point_id"]))
    assert len(table) == 12 and len(resumed) == 10 and not set(resumed) & set(seen)


def test_ipusim_sweep_with_a_bare_ray_before_the_spec_runs_it_on_ray(cluster, tmp_path,
                                                                     monkeypatch, capsys):
    """`ipusim sweep --ray SPEC`, as a user types it: the spec on the running Ray."""
    spec_path = tmp_path / "tiny.toml"
    spec_path.write_text('[model]\nfactory = "sweep_models:pipelined"\n[space]\n'
                         'replicationFactor = [1, 2]\n"Training.gradientAccumulation" = [2, 8]\n')
    puts = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value: puts.append(value) or real_put(value))
    assert ipusim_main(["sweep", "--ray", str(spec_path), "--no-progress"]) == 0
    assert "4 points: 2 fit, 0 do not fit, 2 invalid" in capsys.readouterr().out
    assert len(puts) == 1  # the points ran on Ray: their work went to its object store
    on_ray = read_results(tmp_path / "tiny.parquet")
    here = sweep(load(spec_path), tmp_path / "here.parquet", InProcess())
    pd.testing.assert_frame_equal(on_ray, here)


def test_a_ray_the_backend_starts_is_shut_down_when_the_sweep_ends(cluster, tmp_path):
    """Last in the module: it ends the shared cluster to start its own."""
    ray.shutdown()
    table = sweep(SPEC, tmp_path / "results.csv", RayCluster(num_cpus=1))
    assert len(table) == 12
    assert not ray.is_initialized()
