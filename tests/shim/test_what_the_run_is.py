"""What a run is, said everywhere: its batching and timing-only on the exit line and in
every report's header, a call's batch split down to single samples said with where it
went, one throughput in the exit line, the report, the summary and the index, and a
generation loop on the host offered its loop on the device, never device iterations.
Each script runs through ``ipusim run`` in a fresh interpreter; the commands that read its
reports back (``ipusim summary``, ``ipusim report --index``) run here."""
import json
import re
import subprocess
import sys

import pytest

from ipusim.cli import main as ipusim_command

pytestmark = pytest.mark.slow  # each runs a script in a fresh interpreter

PLAIN_LOADER = """
import torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 2)

    def forward(self, x, y):
        out = self.linear(x)
        return out, torch.nn.functional.cross_entropy(out, y)

torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
opts = poptorch.Options().deviceIterations(8).replicationFactor(2)
net = Net()
model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
loader = {loader}
for x, y in loader:
    model(x, y)
"""

SLOW_LOADER = """
import time
import torch, poptorch

class Slow(torch.utils.data.Dataset):  # a host-side transform: about 4,000 items/s
    def __len__(self):
        return 512

    def __getitem__(self, index):
        time.sleep(0.00025)
        return torch.full((8,), float(index))

opts = poptorch.Options().deviceIterations(4)
model = poptorch.inferenceModel(torch.nn.Linear(8, 2), opts)
for x in poptorch.DataLoader(opts, Slow(), batch_size=16):
    model(x)
"""

# optimum-graphcore's decoder step as its generation loop calls it: the class the
# shim knows it by (optimum.graphcore.generation.utils.DecoderWrapper), wrapping a
# tiny language model.
DECODER_WRAPPER = """
import torch

class DecoderWrapper(torch.nn.Module):
    def __init__(self, pipelined_model):
        super().__init__()
        self.pipelined_model = pipelined_model

    def forward(self, t, input_ids):
        return self.pipelined_model(input_ids)
"""

GREEDY = """
import torch, poptorch
from optimum.graphcore.generation.utils import DecoderWrapper

class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        self.head = torch.nn.Linear(16, 32)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids[:, -1]))

torch.manual_seed(0)
decoder = poptorch.inferenceModel(DecoderWrapper(TinyLM().eval()), poptorch.Options())
tokens = torch.randint(0, 32, (2, 3))
for step in range(8):  # greedy: each call needs the token the last one chose
    logits = decoder(torch.tensor([step]), tokens[:, -1:])  # fixed shapes: the last token
    tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
print("generated", tuple(tokens.shape))
"""


# optimum-graphcore's IPUTrainer as far as the shim sees it: a module of that name that
# builds the Options, the poptorch.DataLoader and the training model itself.
TRAINER = """
import poptorch, torch

def train(model, dataset):
    opts = poptorch.Options().deviceIterations(4)
    loader = poptorch.DataLoader(opts, dataset, batch_size=2)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    for x, y in loader:
        training(x, y)
"""

TRAINED = """
import time
import torch
from optimum.graphcore.trainer import train

class Slow(torch.utils.data.Dataset):  # a host-side transform: about 1,000 items/s
    def __len__(self):
        return 64

    def __getitem__(self, index):
        time.sleep(0.001)
        return torch.full((8,), float(index)), index % 2

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 2)

    def forward(self, x, y):
        out = self.linear(x)
        return out, torch.nn.functional.cross_entropy(out, y)

train(Net(), Slow())
"""

OPTIMUM_PACKAGE = {f"optimum/{name}__init__.py": "" for name in ("", "graphcore/",
                                                                 "graphcore/generation/")}


def ipusim(tmp_path, source: str, *flags: str, files: dict[str, str] | None = None):
    """Run ``source`` through ``ipusim run --report``: its stderr and reports folder."""
    for name, text in (files or {}).items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    script = tmp_path / "script.py"
    script.write_text(source)
    reports = tmp_path / "reports"
    run = subprocess.run([sys.executable, "-m", "ipusim", "run", "--no-progress", *flags,
                          "--report", str(reports), str(script)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    return run.stdout, run.stderr, reports


def exit_line(stderr: str, name: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith(f"  {name}: "))


def test_a_plain_loaders_batch_split_to_single_samples_says_where_it_went(tmp_path):
    _, err, reports = ipusim(tmp_path, PLAIN_LOADER.format(
        loader="torch.utils.data.DataLoader(data, batch_size=16)"))
    assert ("ipusim: training: each call's batch of 16 samples is split into 8 device "
            "iterations x 2 replicas, so the micro-batch size is 1.") in err
    assert "poptorch.DataLoader(options, dataset, batch_size=B), which loads B x 16" in err
    assert err.count("so the micro-batch size is 1") == 1  # once, at the first call
    shape = "micro-batch size 1, device iterations 8, replicas 2, gradient accumulation 1"
    assert shape in exit_line(err, "training") and "timing-only" not in err
    assert shape in (reports / "training" / "report.html").read_text()
    assert "Micro-batch size:           1\n" in (reports / "training" / "summary.txt").read_text()


def test_a_poptorch_loaders_batch_is_the_micro_batch_and_no_warning(tmp_path):
    _, err, reports = ipusim(tmp_path, PLAIN_LOADER.format(
        loader="poptorch.DataLoader(opts, data, batch_size=2)"))
    assert "so the micro-batch size is 1" not in err
    line = exit_line(err, "training")
    assert "micro-batch size 2, device iterations 8, replicas 2, gradient accumulation 1" in line


def test_a_timing_only_run_says_so_on_its_exit_line_and_in_its_reports(tmp_path, capsys):
    _, err, reports = ipusim(tmp_path, PLAIN_LOADER.format(
        loader="poptorch.DataLoader(opts, data, batch_size=2)"), "--timing-only")
    assert "timing-only (no tensors computed" in exit_line(err, "training")
    folder = reports / "training"
    assert "Timing-only:                yes" in (folder / "summary.txt").read_text()
    assert "timing-only (no tensors computed" in (folder / "report.html").read_text()
    assert json.loads((folder / "profile.json").read_text())["timing_only"] is True
    assert ipusim_command(["summary", str(folder)]) == 0
    assert "Timing-only:                yes" in capsys.readouterr().out  # kept in the profile


def test_the_exit_line_the_report_the_summary_and_the_index_give_one_throughput(tmp_path,
                                                                                 capsys):
    _, err, reports = ipusim(tmp_path, SLOW_LOADER)
    folder = reports / "inference"
    profile = json.loads((folder / "profile.json").read_text())
    device, loader = profile["figures"]["throughput(items/s)"], profile["loader_items_per_s"]
    assert loader < device  # the IPUs wait for the loader: the run's figure is the loader's
    line = exit_line(err, "inference")
    said = re.match(r"  inference: ([\d,]+) items/s fed by the data loader "
                    r"\(the IPUs alone ([\d,]+)\)", line)
    assert said, line
    assert said.group(1) == f"{loader:,.0f}" and said.group(2) == f"{device:,.0f}"
    summary = (folder / "summary.txt").read_text()
    assert re.search(rf"  Throughput: +{loader:,.1f} items/s fed by the data loader "
                     rf"\(the IPUs alone {device:,.1f}\)\n", summary)
    assert f"{loader:,.1f} items/s fed by the data loader" in (folder / "report.html").read_text()
    assert ipusim_command(["report", "--index", str(reports)]) == 0, capsys.readouterr().err
    page = (reports / "index.html").read_text()
    cell = re.search(r'<td class="value">([\d,]+)<br><span class="fed">fed by the data loader; '
                     r"the IPUs alone ([\d,]+)</span>", page)
    assert cell and cell.groups() == said.groups()


def test_a_generation_loop_on_the_host_is_never_advised_device_iterations(tmp_path):
    out, err, reports = ipusim(tmp_path, GREEDY, files={
        **OPTIMUM_PACKAGE, "optimum/graphcore/generation/utils.py": DECODER_WRAPPER})
    assert "generated (2, 11)" in out
    profile = json.loads((reports / "inference" / "profile.json").read_text())
    assert profile["run"]["autoregressive"] is True
    verdict = profile["verdict"]
    line = exit_line(err, "inference")
    assert "device iterations 1" in line  # what the run is ...
    said = json.dumps(verdict) + line.split("; micro-batch size")[0]  # ... and its advice
    assert "deviceIterations" not in said and "device iterations" not in said
    loop = next(w for w in verdict["what_if"] if w["option"] and
                "on_device_generation_steps=4" in w["option"])
    assert loop["speedup"] > 1.5 and verdict["kind"] == "host_round_trip"
    assert any("on_device_generation_steps=4" in line for line in verdict["advice"])


def test_a_model_optimums_trainer_wraps_is_advised_in_its_users_terms(tmp_path):
    _, err, reports = ipusim(tmp_path, TRAINED, files={
        **OPTIMUM_PACKAGE, "optimum/graphcore/trainer.py": TRAINER})
    profile = json.loads((reports / "training" / "profile.json").read_text())
    verdict = profile["verdict"]
    assert verdict["kind"] == "data_loader"
    advice = " ".join(verdict["advice"])
    assert 'IPUTrainingArguments.dataloader_mode = "async"' in advice
    assert "IPUTrainingArguments.dataloader_num_workers" in advice
    assert "mode=poptorch.DataLoaderMode.Async" not in advice and "(num_workers)" not in advice
    assert "an IPUTrainer subclass's get_train_dataloader" in advice
    options = {w["option"] for w in verdict["what_if"]}
    assert {"IPUConfig.device_iterations", "IPUConfig.gradient_accumulation_steps",
            "IPUConfig.replication_factor"} <= options
    assert not options & {"opts.deviceIterations", "opts.Training.gradientAccumulation",
                          "opts.replicationFactor"}
    # The summary and the HTML report word it the same way, kept in the profile.
    assert 'IPUTrainingArguments.dataloader_mode = "async"' in \
        (reports / "training" / "summary.txt").read_text()
