"""Every model family optimum-graphcore 0.7.1 registers a pipelined model for, on the
paths its examples and notebooks use, checked against plain transformers in fp32.

One run of ``scripts/optimum_families.py`` (one ``ipusim run``: transformers is
imported once) does every path of every family with tiny random models and writes
what each path did; each test here reads one path's result and the
``profile.json`` of each report its models wrote. The numbers are checked in the
script, against plain transformers on the CPU: a training step's every weight,
the evaluation loss, the generated tokens. The reports are checked here: each
says what the run was (training or inference, pipelined over the IPUs the
IPUConfig asks for, its gradient accumulation and device iterations, a
generation loop on the host or on the device), and its verdict names optimum's
settings and never advises a change the run cannot take.
"""
import json

import pytest
from support.ecosystem import Run, advice_of

pytestmark = pytest.mark.ecosystem

# Each family and the paths its examples run: IPUTrainer's train and evaluate,
# generate() (the decoder a step of a loop on the host) and the notebooks' KV-cache
# generation (on-device steps, the encoder's output in updatable named buffers)
# where optimum-graphcore has it (BART, T5, Whisper: its @supports_kv_cache models),
# for Whisper also with its encoder under poptorch.cond on the decoder's IPU
# (use_cond_encoder, its quantized notebook's layout).
PATHS = {
    "BART": ("train", "evaluate", "generate", "kv_cache"),
    "BERT": ("train", "evaluate"),
    "ConvNeXt": ("train", "evaluate"),
    "DeBERTa": ("train", "evaluate"),
    "DistilBERT": ("train", "evaluate"),
    "GPT-2": ("train", "evaluate", "generate"),
    "GroupBERT": ("train", "evaluate"),
    "HuBERT": ("train", "evaluate"),
    "LXMERT": ("train", "evaluate"),
    "MPNet": ("train", "evaluate"),
    "MT5": ("train", "evaluate", "generate"),
    "RoBERTa": ("train", "evaluate"),
    "T5": ("train", "evaluate", "generate", "kv_cache"),
    "ViT": ("train", "evaluate"),
    "Wav2Vec2": ("train", "evaluate"),
    "Whisper": ("train", "evaluate", "generate", "kv_cache", "kv_cache_cond"),
}
ENCODER_DECODER = {"BART", "MT5", "T5", "Whisper"}
CASES = [(family, path) for family, paths in PATHS.items() for path in paths]


class Families:
    """The one run of every family's paths: its results and its reports' profiles."""

    def __init__(self, run: Run, results: dict):
        self.run, self.results = run, results

    def profiles(self, family: str, path: str) -> list[dict]:
        return [self.run.profiles[name] for name in self.results[family][path]["reports"]]


@pytest.fixture(scope="module")
def families(ipusim, tmp_path_factory) -> Families:
    where = tmp_path_factory.mktemp("families")
    results = where / "results.json"
    run = Run(ipusim, where, "optimum_families.py", str(where / "reports"), str(results))
    return Families(run, json.loads(results.read_text()))


def test_the_run_covers_every_family_optimum_graphcore_pipelines(families):
    assert len(PATHS) == 16 and len(CASES) == 41
    assert {f: tuple(paths) for f, paths in families.results.items()} == PATHS
    # Each model the paths compiled wrote its report, and each report is one path's.
    named = [name for paths in families.results.values() for result in paths.values()
             for name in result["reports"]]
    assert sorted(named) == sorted(families.run.profiles)


@pytest.mark.parametrize("family, path", CASES, ids=[f"{f}-{p}" for f, p in CASES])
def test_each_family_runs_its_path_as_plain_transformers_does(families, family, path):
    result = families.results[family][path]
    assert result["error"] is None, result["error"]
    assert result["ran"] and result["checks"], result
    for name, check in result["checks"].items():  # against plain transformers, in fp32
        assert check["difference"] <= check["tolerance"], (name, check)
    settings = result["settings"]
    profiles = families.profiles(family, path)
    for profile in profiles:
        assert profile["timing_only"] is False
        assert profile["figures"]["throughput(items/s)"] > 0
        words = profile["setting_names"]["words"]
        assert words["replicas"].startswith("IPUConfig."), words  # optimum's settings
    if path == "train":
        (profile,) = profiles
        run = profile["run"]
        assert run["training"] is True and run["execution"] == "pipelined"
        assert run["gradient_accumulation"] == settings["gradient_accumulation"]
        assert profile["figures"]["ipus"] == settings["ipus"]
        assert profile["steps"] == 1 and run["optimizer"]["name"] == "AdamW"
        assert profile["setting_names"]["words"]["gradient_accumulation"] == \
            "IPUConfig.gradient_accumulation_steps"
    elif path == "evaluate":
        (profile,) = profiles
        run = profile["run"]
        # IPUConfig.to_options(for_inference=True) shards an inference model's Blocks.
        assert run["training"] is False and run["execution"] == "sharded"
        assert run["device_iterations"] == settings["device_iterations"]
        assert profile["figures"]["ipus"] == settings["ipus"]
        assert profile["steps"] == settings["calls"]
    else:  # generation: the encoder once (unless under the decoder's cond), the decoder
        *encoder, decoder = profiles
        assert len(encoder) == (family in ENCODER_DECODER and path != "kv_cache_cond")
        for profile in encoder:
            assert profile["run"]["autoregressive"] is False and profile["steps"] == 1
        run, said = decoder["run"], advice_of(decoder["verdict"])
        assert run["training"] is False and decoder["steps"] == settings["calls"]
        if path == "generate":
            # Each call needs the last one's token: the verdict offers optimum's
            # on-device generation, never more device iterations, and says what it
            # needs where optimum keeps no KV cache for the model.
            assert run["autoregressive"] is True and run["device_iterations"] == 1
            assert "on_device_generation_steps=" in said
            assert "device iterations" not in said and "deviceIterations" not in said
            assert ("needs the KV cache" in said) is ("kv_cache" not in PATHS[family])
        else:
            # The loop on the device: its device iterations are the generation steps,
            # and the encoder's output is a buffer the host updates (or, under cond,
            # the model's own).
            assert run["autoregressive"] is False
            assert run["device_iterations"] == settings["on_device_generation_steps"]
            buffers = decoder["options"].get("_Popart.updatableNamedBuffers", [])
            assert ("encoder_last_hidden_state" in buffers) is (path == "kv_cache"), buffers
            assert "on_device_generation_steps" in \
                decoder["setting_names"]["words"]["device_iterations"]
