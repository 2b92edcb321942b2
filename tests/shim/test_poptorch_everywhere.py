"""``import poptorch`` wherever the user's code runs: the asynchronous loader's
worker imports it whenever its parent could (however the parent got it), the
pytest plugin ``poptorch_shim.testing`` runs a project's own test suite on
the shim, and ``ipusim alias`` makes the name the shim's in a whole
environment (refusing to hide a real PopTorch)."""
import importlib.metadata
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from poptorch_shim import commands
from poptorch_shim._core import aliases as _aliases

ROOT = Path(__file__).resolve().parents[2]

DATASET = '''
import poptorch  # the user's module: only PopTorch's name
import torch


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, index):
        return torch.tensor([index * index])
'''

TEST = '''
import importlib.metadata

import poptorch

from squares import Squares


def test_async_loader_over_a_dataset_whose_module_imports_poptorch():
    options = poptorch.Options().deviceIterations(2)
    loader = poptorch.DataLoader(options, Squares(), batch_size=3,
                                 mode=poptorch.DataLoaderMode.Async)
    batches = [batch.flatten().tolist() for batch in loader]
    loader.terminate()
    assert batches == [[i * i for i in range(6)], [i * i for i in range(6, 12)]]
    assert poptorch.__version__.endswith("+ipusim")
'''

# Where the alias folder is on the path (the plugin, the runner, a .pth file), PopTorch's
# metadata is the shim's; a conftest's own sys.modules entry makes the module alone.
METADATA_TEST = '''

def test_poptorchs_metadata_is_the_shims():
    assert importlib.metadata.version("poptorch") == poptorch.__version__
'''


def project(tmp_path: Path, conftest: str | None = None) -> Path:
    """A user's project: a dataset module and a test that both `import poptorch`
    (and, without a conftest of its own, one that reads PopTorch's metadata)."""
    (tmp_path / "squares.py").write_text(DATASET)
    (tmp_path / "test_squares.py").write_text(TEST + (METADATA_TEST if conftest is None else ""))
    if conftest is not None:
        (tmp_path / "conftest.py").write_text(textwrap.dedent(conftest))
    return tmp_path


def run_pytest(folder: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "IPUSIM_"))}
    env["PYTHONPATH"] = str(ROOT)  # the shim importable, no alias on the path
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *flags,
         "--rootdir", str(folder), str(folder)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_projects_own_tests_run_on_the_shim_with_the_plugin(tmp_path):
    result = run_pytest(project(tmp_path), "-p", "poptorch_shim.testing")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    assert "poptorch: ipusim's PopTorch shim" in result.stdout  # the report header


@pytest.mark.slow
def test_without_the_plugin_the_missing_module_is_named(tmp_path):
    result = run_pytest(project(tmp_path))
    assert result.returncode != 0
    assert "No module named 'poptorch'" in result.stdout + result.stderr


@pytest.mark.slow
def test_a_parent_aliased_by_sys_modules_gives_its_worker_the_alias_too(tmp_path):
    """No plugin, no runner: a conftest puts the shim in sys.modules itself. The
    worker unpickles the dataset by its module, which does `import poptorch`:
    it installs the aliases first because its parent had them."""
    conftest = """
        import sys

        import poptorch_shim

        sys.modules["poptorch"] = poptorch_shim
    """
    result = run_pytest(project(tmp_path, conftest))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_child_marker_installs_the_aliases_when_unpickled(monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(_aliases.ALIASES)])
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.delitem(sys.modules, "poptorch", raising=False)
    monkeypatch.delitem(sys.modules, "popdist", raising=False)
    assert not _aliases.in_use() and _aliases.for_child() is None  # a real PopTorch stays
    monkeypatch.setitem(sys.modules, "poptorch", sys.modules["poptorch_shim"])
    marker = _aliases.for_child()
    assert marker is not None
    assert pickle.loads(pickle.dumps(marker)) is None
    assert sys.path[0] == str(_aliases.ALIASES)
    assert os.environ["PYTHONPATH"] == str(_aliases.ALIASES)


def test_poptorchs_metadata_is_the_shims_wherever_the_alias_folder_is_on_the_path(
        monkeypatch):
    """``importlib.metadata`` finds PopTorch's distribution in the alias folder: the
    version the shim implements, which a library's ``require_version("poptorch>=3.3")``
    (optimum-graphcore's) accepts."""
    import poptorch_shim

    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(_aliases.ALIASES)])
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("poptorch")
    monkeypatch.syspath_prepend(str(_aliases.ALIASES))
    version = importlib.metadata.version("poptorch")
    assert version == poptorch_shim.__version__ == "3.3.0+ipusim"
    assert Version(version).public == "3.3.0" and Version(version).local == "ipusim"
    assert Requirement("poptorch>=3.3").specifier.contains(version)
    assert not Requirement("poptorch>=3.4").specifier.contains(version)
    assert importlib.metadata.packages_distributions()["poptorch"] == ["poptorch"]


def test_in_use_knows_each_of_the_three_names_made_by_hand(monkeypatch):
    import poptorch_shim.popart

    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(_aliases.ALIASES)])
    for name in _aliases.NAMES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert not _aliases.in_use()
    monkeypatch.setitem(sys.modules, "popart", poptorch_shim.popart)
    assert _aliases.in_use()


def alias(*argv: str) -> int:
    return commands.main(["alias", *argv])


def test_alias_install_and_remove_a_pth_file(tmp_path, capsys):
    assert alias("install", "--site-packages", str(tmp_path)) == 0
    pth = tmp_path / _aliases.PTH_NAME
    assert pth.read_text().splitlines()[1] == str(_aliases.ALIASES)
    assert "is now ipusim's shim" in capsys.readouterr().out
    assert alias("status", "--site-packages", str(tmp_path)) == 0
    assert "ipusim alias: installed (" in capsys.readouterr().out
    assert alias("remove", "--site-packages", str(tmp_path)) == 0
    assert not pth.exists()
    assert alias("remove", "--site-packages", str(tmp_path)) == 0
    assert "no alias was installed" in capsys.readouterr().out


@pytest.mark.parametrize("real", ["poptorch", "poptorch-3.3.0.dist-info", "popdist", "popart"])
def test_alias_install_refuses_to_hide_a_real_poptorch(tmp_path, capsys, real):
    (tmp_path / real).mkdir()
    assert alias("install", "--site-packages", str(tmp_path)) == 1
    error = capsys.readouterr().err
    assert "a real PopTorch is installed" in error and real in error
    assert not (tmp_path / _aliases.PTH_NAME).exists()


def test_alias_leaves_a_file_of_its_name_it_did_not_write(tmp_path, capsys):
    foreign = tmp_path / _aliases.PTH_NAME
    foreign.write_text("/somewhere/else\n")
    assert alias("status", "--site-packages", str(tmp_path)) == 0
    assert "not installed in" in capsys.readouterr().out
    for action in ("remove", "install"):
        assert alias(action, "--site-packages", str(tmp_path)) == 1
        assert "not written by `ipusim alias install`" in capsys.readouterr().err
        assert foreign.read_text() == "/somewhere/else\n"


def test_alias_refuses_an_empty_site_packages(capsys):
    with pytest.raises(SystemExit) as refused:
        alias("status", "--site-packages", "")
    assert refused.value.code == 2
    assert "--site-packages: expected a path, got an empty string" in capsys.readouterr().err


@pytest.mark.slow
def test_an_installed_alias_makes_poptorch_the_shim_in_every_interpreter(tmp_path):
    assert alias("install", "--site-packages", str(tmp_path)) == 0
    code = ("import site, sys; site.addsitedir(sys.argv[1]); import poptorch, poptorch_shim; "
            "import popdist.poptorch, popart; assert poptorch is poptorch_shim; "
            "assert popart is poptorch_shim.popart; "
            "assert popdist.poptorch is poptorch_shim.popdist.poptorch; "
            "import importlib.metadata as m; print('shim', m.version('poptorch'))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "shim 3.3.0+ipusim", result.stderr
