"""``--ray ray://HOST:PORT`` needs Ray Client: without it the sweep says so in one line
naming the extra that installs it, not as a fault of the spec."""
import pytest

from poptorch_shim import commands
from poptorch_shim.sweep import backends


def test_a_ray_client_address_without_ray_client_names_the_extra(monkeypatch, capsys):
    pytest.importorskip("ray")
    monkeypatch.setattr(backends, "find_spec", lambda name: None)
    spec = "scenarios/sweeps/bert_large.toml"
    with pytest.raises(SystemExit) as stopped:
        commands.main(["sweep", spec, "--ray", "ray://127.0.0.1:1", "--no-progress"])
    message = str(stopped.value.code)
    assert message.startswith("ipusim sweep: error: --ray ray://127.0.0.1:1 connects through "
                              "Ray Client, which needs ray[client]")
    assert "pip install 'ipusim[ray-client]'" in message and spec not in message
