"""Every model family optimum-graphcore 0.7.1 registers a pipelined model for, run
unmodified on the paths its examples and notebooks use, each checked against plain
transformers on the CPU in fp32: random weights from tiny configs, random inputs,
no hub access.

- ``train``: ``IPUTrainer.train()`` for one optimizer step (gradient accumulation
  over the pipeline's micro-batches, the trainer's own AdamW without bias
  correction); every trained weight is the one plain transformers gets from the
  same samples' mean gradient and that update.
- ``evaluate``: ``IPUTrainer.evaluate()`` on the trained model; its ``eval_loss``
  is plain transformers' loss of the evaluation set with the same weights.
- ``generate``: the pipelined model's greedy ``generate()`` (the decoder a step of
  a loop on the host); its tokens are transformers' own greedy search.
- ``kv_cache``: ``parallelize(for_generation=True, use_cache=True, ...)`` with
  on-device generation steps and, for encoder-decoder models, the encoder's output
  in updatable named buffers: the notebooks' fast path; the same tokens.
- ``kv_cache_cond``: the same with ``use_cond_encoder=True`` (Whisper's quantized
  notebook): encoder and decoder on one IPU, one model, the encoder run under
  ``poptorch.cond`` at the first step only.

Usage: ``ipusim run --report REPORTS optimum_families.py REPORTS RESULTS.json
[FAMILY ...]``. Each path is run even if an earlier one failed; RESULTS.json
holds, for each family and path, whether it ran, what it checked (the largest
difference from plain transformers and its tolerance) and the report folders its
models wrote (the folders that appeared in REPORTS while it ran).
"""
import json
import sys
import tempfile
import traceback
from pathlib import Path

import torch
import transformers
from optimum.graphcore import IPUConfig, IPUTrainer, IPUTrainingArguments
from optimum.graphcore.modeling_utils import to_pipelined
from optimum.graphcore.models.groupbert import GroupBertConfig, GroupBertForSequenceClassification

SEQ = 8  # tokens a sample
VOCAB = 64
MICRO_BATCH = 2


# --------------------------------------------------------------------------- data
def tokens(g, n, low=4, high=VOCAB):
    return torch.randint(low, high, (n,), generator=g)


def text_classification(g):
    return {"input_ids": tokens(g, SEQ), "attention_mask": torch.ones(SEQ, dtype=torch.long),
            "labels": torch.randint(0, 2, (), generator=g)}


def masked_lm(g):
    # Every position labelled: each micro-batch's mean loss weighs its tokens alike,
    # so the step's mean gradient does not depend on how samples fall into batches.
    ids = tokens(g, SEQ)
    return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long),
            "labels": tokens(g, SEQ)}


def causal_lm(g):
    ids = tokens(g, SEQ)
    return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long),
            "labels": ids.clone()}


def seq2seq(g):
    return {"input_ids": tokens(g, SEQ), "attention_mask": torch.ones(SEQ, dtype=torch.long),
            "labels": tokens(g, SEQ)}


def image(size, classes):
    def make(g):
        return {"pixel_values": torch.randn(3, size, size, generator=g),
                "labels": torch.randint(0, classes, (), generator=g)}
    return make


AUDIO = 400  # samples of raw audio: 2 frames after the tiny feature extractor


def audio_classification(g):
    return {"input_values": torch.randn(AUDIO, generator=g),
            "labels": torch.randint(0, 2, (), generator=g)}


def ctc(g):
    return {"input_values": torch.randn(AUDIO, generator=g),
            "labels": torch.randint(1, 8, (3,), generator=g)}


def lxmert(g):
    return {"input_ids": tokens(g, SEQ), "attention_mask": torch.ones(SEQ, dtype=torch.long),
            "token_type_ids": torch.zeros(SEQ, dtype=torch.long),
            "visual_feats": torch.randn(4, 8, generator=g),
            "visual_pos": torch.rand(4, 4, generator=g),
            "labels": torch.randint(0, 3, (), generator=g)}


def whisper(g):
    return {"input_features": torch.randn(8, 16, generator=g),
            "labels": tokens(g, SEQ)}


class Samples(torch.utils.data.Dataset):
    def __init__(self, make, count, seed):
        g = torch.Generator().manual_seed(seed)
        self.items = [make(g) for _ in range(count)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def batch(self):
        """Every sample stacked: one batch for plain transformers."""
        return {k: torch.stack([item[k] for item in self.items]) for k in self.items[0]}


# ---------------------------------------------------------------------- families
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
BERT_LIKE = {"vocab_size": VOCAB, "hidden_size": 16, "num_hidden_layers": 2,
             "num_attention_heads": 2, "intermediate_size": 32,
             "max_position_embeddings": 32, **NO_DROPOUT}
#: What BART and Whisper share: one tiny encoder and decoder layer, no dropout, and
#: weights wide enough that a tiny model's tokens depend on its input.
TINY_ENCODER_DECODER = {"vocab_size": VOCAB, "d_model": 16, "encoder_layers": 1,
                        "decoder_layers": 1, "encoder_attention_heads": 2,
                        "decoder_attention_heads": 2, "encoder_ffn_dim": 32,
                        "decoder_ffn_dim": 32, "dropout": 0.0, "attention_dropout": 0.0,
                        "activation_dropout": 0.0, "pad_token_id": 1, "bos_token_id": 0,
                        "eos_token_id": 2, "init_std": 0.3}
# Generation: 6 new tokens after the decoder's start (encoder-decoder) or the prompt.
NEW_TOKENS = 6
WAV2VEC = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
           "intermediate_size": 32, "conv_dim": (8, 8), "conv_stride": (5, 4),
           "conv_kernel": (10, 8), "num_conv_pos_embeddings": 4,
           "num_conv_pos_embedding_groups": 2, "mask_time_prob": 0.0,
           "hidden_dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0,
           "feat_proj_dropout": 0.0, "final_dropout": 0.0, "layerdrop": 0.0,
           "vocab_size": 8, "pad_token_id": 0, "ctc_loss_reduction": "mean",
           "do_stable_layer_norm": False, "feat_extract_norm": "group"}
T5_LIKE = {"vocab_size": VOCAB, "d_model": 16, "d_kv": 8, "d_ff": 32, "num_layers": 1,
           "num_decoder_layers": 1, "num_heads": 2, "dropout_rate": 0.0,
           "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
TWO_IPUS = {"layers_per_ipu": [1, 1], "ipus_per_replica": 2}
# The generating families' weights are drawn wider than their configs' defaults
# (init_std 0.3): with the defaults a tiny random model makes the same tokens
# whatever its input, which would check little.


def family(model_cls, config, data, paths=("train", "evaluate"), ipu=TWO_IPUS,
           accumulation=4, micro_batch=MICRO_BATCH, kv=None):
    return {"model": model_cls, "config": config, "data": data, "paths": paths, "ipu": ipu,
            "accumulation": accumulation, "micro_batch": micro_batch, "kv": kv or {}}


def families():
    t = transformers
    return {
        "BART": family(
            t.BartForConditionalGeneration,
            lambda: t.BartConfig(**TINY_ENCODER_DECODER, max_position_embeddings=32,
                                 decoder_start_token_id=0, forced_eos_token_id=None,
                                 forced_bos_token_id=None),
            seq2seq, ("train", "evaluate", "generate", "kv_cache"), accumulation=6,
            kv={"use_encoder_output_buffer": True}),
        "BERT": family(t.BertForSequenceClassification,
                       lambda: t.BertConfig(**BERT_LIKE, num_labels=2), text_classification),
        "ConvNeXt": family(
            t.ConvNextForImageClassification,
            lambda: t.ConvNextConfig(num_channels=3, patch_size=2, num_stages=2,
                                     hidden_sizes=[8, 16], depths=[1, 1], num_labels=3,
                                     drop_path_rate=0.0, image_size=8),
            image(8, 3)),
        "DeBERTa": family(
            t.DebertaForSequenceClassification,
            lambda: t.DebertaConfig(**BERT_LIKE, num_labels=2, relative_attention=True,
                                    pos_att_type=["c2p", "p2c"], max_relative_positions=8,
                                    type_vocab_size=0, pooler_dropout=0.0),
            text_classification),
        "DistilBERT": family(
            t.DistilBertForSequenceClassification,
            lambda: t.DistilBertConfig(vocab_size=VOCAB, dim=16, n_layers=2, n_heads=2,
                                       hidden_dim=32, max_position_embeddings=32,
                                       dropout=0.0, attention_dropout=0.0,
                                       seq_classif_dropout=0.0, num_labels=2),
            text_classification),
        "GPT-2": family(
            t.GPT2LMHeadModel,
            lambda: t.GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=2,
                                 n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0,
                                 attn_pdrop=0.0, bos_token_id=0, eos_token_id=0),
            causal_lm, ("train", "evaluate", "generate"), accumulation=6),
        "GroupBERT": family(GroupBertForSequenceClassification,
                            lambda: GroupBertConfig(**BERT_LIKE, num_labels=2),
                            text_classification),
        "HuBERT": family(t.HubertForSequenceClassification,
                         lambda: t.HubertConfig(**WAV2VEC, num_labels=2,
                                                classifier_proj_size=8),
                         audio_classification),
        "LXMERT": family(
            t.LxmertForQuestionAnswering,
            lambda: t.LxmertConfig(vocab_size=VOCAB, hidden_size=16, num_attention_heads=2,
                                   intermediate_size=32, l_layers=1, x_layers=1,
                                   r_layers=1, visual_feat_dim=8, visual_pos_dim=4,
                                   num_qa_labels=3, max_position_embeddings=32,
                                   **NO_DROPOUT),
            lxmert, ipu={"ipus_per_replica": 4, "layers_per_ipu": [0, 1, 1, 1]},
            accumulation=8, micro_batch=1),
        # optimum's pipelined MPNet builds its encoder again after transformers tied
        # the head's decoder to the word embedding: its head has weights of its own, so
        # plain transformers' is untied too.
        "MPNet": family(t.MPNetForMaskedLM,
                        lambda: t.MPNetConfig(**BERT_LIKE, relative_attention_num_buckets=32,
                                              pad_token_id=1, tie_word_embeddings=False),
                        masked_lm, accumulation=6),
        "MT5": family(t.MT5ForConditionalGeneration, lambda: t.MT5Config(**T5_LIKE),
                      seq2seq, ("train", "evaluate", "generate")),
        "RoBERTa": family(t.RobertaForSequenceClassification,
                          lambda: t.RobertaConfig(**BERT_LIKE, num_labels=2, pad_token_id=1),
                          text_classification),
        # Untied, as flan-t5 (its notebooks' T5) is: a tiny tied T5 repeats one token.
        "T5": family(t.T5ForConditionalGeneration,
                     lambda: t.T5Config(**T5_LIKE, tie_word_embeddings=False), seq2seq,
                     ("train", "evaluate", "generate", "kv_cache"), accumulation=6,
                     kv={"use_encoder_output_buffer": True}),
        "ViT": family(t.ViTForImageClassification,
                      lambda: t.ViTConfig(image_size=8, patch_size=4, num_channels=3,
                                          hidden_size=16, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=32,
                                          num_labels=3, **NO_DROPOUT),
                      image(8, 3)),
        "Wav2Vec2": family(t.Wav2Vec2ForCTC, lambda: t.Wav2Vec2Config(**WAV2VEC), ctc,
                           # its layers: 2 convolutions, the positional embedding, 2
                           # encoder layers and the head
                           ipu={"layers_per_ipu": [3, 3], "ipus_per_replica": 2}),
        "Whisper": family(
            t.WhisperForConditionalGeneration,
            lambda: t.WhisperConfig(**TINY_ENCODER_DECODER, num_mel_bins=8,
                                    max_source_positions=8, max_target_positions=16,
                                    decoder_start_token_id=3, begin_suppress_tokens=None,
                                    suppress_tokens=None),
            whisper, ("train", "evaluate", "generate", "kv_cache", "kv_cache_cond"),
            kv={"use_encoder_output_buffer": True}),
    }


# ----------------------------------------------------------------------- checks
def max_difference(a, b):
    return float((a.double() - b.double()).abs().max())


def plain_loss(model, batch):
    with torch.no_grad():
        return float(model(**batch).loss)


def check(result, name, got, tolerance):
    result["checks"][name] = {"difference": got, "tolerance": tolerance}
    assert got <= tolerance, f"{name}: differs from plain transformers by {got} > {tolerance}"


def ipu_config(spec, **extra):
    return IPUConfig(**spec["ipu"], gradient_accumulation_steps=spec["accumulation"],
                     device_iterations=1,
                     inference_device_iterations=spec["ipu"]["ipus_per_replica"], **extra)


def twin(spec):
    """A tiny random model of the family, and a copy of it for plain transformers."""
    torch.manual_seed(0)
    config = spec["config"]()
    plain = spec["model"](config).eval()
    model = spec["model"](config).eval()
    model.load_state_dict(plain.state_dict())
    return config, plain, model


def train_and_evaluate(spec, result_train, result_eval, out, mark):
    """IPUTrainer trains one step and evaluates; plain transformers does the same."""
    config, plain, model = twin(spec)
    steps = spec["micro_batch"] * spec["accumulation"]
    train = Samples(spec["data"], steps, seed=1)
    evaluation = Samples(spec["data"], spec["micro_batch"] * spec["ipu"]["ipus_per_replica"] * 2,
                         seed=2)
    # An epsilon of 1 makes AdamW's first step (no bias correction) nearly linear in the
    # gradient, 0.1 g / (0.03 |g| + 1): the step checks each gradient's value, not only
    # its sign, as the default 1e-8 would.
    lr, beta1, beta2, eps = 0.1, 0.9, 0.999, 1.0
    args = IPUTrainingArguments(output_dir=out, max_steps=1,
                                per_device_train_batch_size=spec["micro_batch"],
                                per_device_eval_batch_size=spec["micro_batch"],
                                learning_rate=lr, adam_beta1=beta1, adam_beta2=beta2,
                                adam_epsilon=eps, dataloader_drop_last=True, fp32=True,
                                report_to=[], save_strategy="no", logging_steps=1)
    config_of_run = ipu_config(spec)
    trainer = IPUTrainer(model=model, ipu_config=config_of_run, args=args,
                         train_dataset=train, eval_dataset=evaluation)
    ipus = spec["ipu"]["ipus_per_replica"]
    result_train["settings"] = {"gradient_accumulation": spec["accumulation"], "ipus": ipus}
    per_call = spec["micro_batch"] * config_of_run.inference_device_iterations
    result_eval["settings"] = {"device_iterations": config_of_run.inference_device_iterations,
                               "ipus": ipus, "calls": len(evaluation) // per_call}
    # Each weight as the pipelined model trains it (parallelize may rescale one in place,
    # as optimum's T5 does its feed-forward output for fp16), by the parameter's identity.
    # (The parameter itself is kept: an identity is not reused while it is held.)
    parallel = {id(p): (p, p.detach().clone()) for p in trainer.model.parameters()}
    outcome = trainer.train()
    mark("train")
    result_train["ran"] = True
    result_train["loss"] = outcome.training_loss

    # Plain transformers: the mean gradient of the step's samples, then PopTorch's
    # AdamW without bias correction (the trainer's): m = (1 - b1) g, v = (1 - b2) g^2,
    # on each weight in the scale the pipelined model holds it.
    plain.train()
    plain.zero_grad()
    plain(**train.batch()).loss.backward()
    trained = trainer.model
    trained.deparallelize()
    got = dict(trained.named_parameters())
    missing = sorted(set(n for n, _ in plain.named_parameters()) - set(got))
    assert not missing, f"trained model lacks plain transformers' parameters {missing[:5]}"
    differences, rescaled, largest = {}, [], 0.0
    with torch.no_grad():
        for name, p in plain.named_parameters():
            scale, (same, held) = 1.0, parallel.get(id(got[name]), (None, None))
            if same is got[name] and not torch.equal(held, p):
                scale = float((held * p).sum() / (p * p).sum())
                assert torch.allclose(held, scale * p, rtol=1e-5, atol=1e-7), name
                rescaled.append(name)
            expected = p.detach().clone()
            # A weight the pipelined model freezes (optimum's speech models freeze their
            # feature encoder, as its examples do) keeps its value.
            if p.grad is not None and got[name].requires_grad:
                g = p.grad / scale
                m, v = (1 - beta1) * g, (1 - beta2) * g ** 2
                expected = (scale * p - lr * m / (v.sqrt() + eps)) / scale
            differences[name] = max_difference(got[name].detach(), expected)
            largest = max(largest, max_difference(expected, p))
    moved = sum(not torch.equal(got[n].detach(), p) for n, p in plain.named_parameters())
    assert moved > 0, "no weight changed in training"
    result_train["weights_updated"] = moved
    result_train["weights_rescaled"] = rescaled
    worst = max(differences, key=differences.get)
    result_train["worst_weight"] = worst
    result_train["largest_update"] = largest
    # fp32: the micro-batches' gradients summed in another order than one batch's.
    check(result_train, "weights after one step", differences[worst], 1e-4 * largest + 1e-7)
    with torch.no_grad():
        for name, p in plain.named_parameters():
            p.copy_(got[name].detach())
    trained.parallelize(**trained.ipu_config._parallelize_kwargs)

    metrics = trainer.evaluate()
    mark("evaluate")
    result_eval["ran"] = True
    result_eval["eval_loss"] = metrics["eval_loss"]
    plain.eval()
    expected_loss = plain_loss(plain, evaluation.batch())
    check(result_eval, "evaluation loss", abs(metrics["eval_loss"] - expected_loss),
          1e-4 * max(1.0, abs(expected_loss)))


def prompt_of(spec, count=2):
    items = Samples(spec["data"], count, seed=3).batch()
    key = "input_features" if "input_features" in items else "input_ids"
    return {k: v for k, v in items.items() if k in (key, "attention_mask")}


def generate(spec, result, path):
    """The pipelined model generates greedily, as transformers does on the CPU."""
    kv_cache = path.startswith("kv_cache")
    config, plain, model = twin(spec)
    inputs = prompt_of(spec)
    batch = next(iter(inputs.values())).shape[0]
    encoder_decoder = config.is_encoder_decoder
    length = 1 + NEW_TOKENS if encoder_decoder else SEQ + NEW_TOKENS
    extra, steps = {}, 1
    if kv_cache:
        steps = 2
        extra = {"use_cache": True, "batch_size": batch, "max_length": length,
                 "num_beams": 1, "on_device_generation_steps": steps, **spec["kv"]}
        ipu = IPUConfig(**spec["ipu"], inference_device_iterations=steps)
        if path == "kv_cache_cond":  # every layer on the one IPU
            extra = {**extra, "use_encoder_output_buffer": False, "use_cond_encoder": True}
            ipu = IPUConfig(layers_per_ipu=[-1], ipus_per_replica=1,
                            inference_device_iterations=steps)
    else:
        ipu = IPUConfig(**spec["ipu"], inference_device_iterations=1)
    pipelined = to_pipelined(model, ipu.eval()).parallelize(for_generation=True, **extra).eval()
    kwargs = {"max_length": length, "do_sample": False, "num_beams": 1}
    if not encoder_decoder:
        kwargs["pad_token_id"] = config.eos_token_id
    got = pipelined.generate(**inputs, use_cache=kv_cache, **kwargs)
    result["ran"] = True
    expected = plain.generate(**inputs, **kwargs)
    result["tokens"] = list(got.shape)
    made = got.shape[1] - (1 if encoder_decoder else SEQ)  # the decoder's start, the prompt
    result["settings"] = {"calls": made // steps if kv_cache else made,
                          "on_device_generation_steps": steps if kv_cache else 0}
    # On-device generation makes its steps' tokens a call at a time and stops a call
    # short of max_length (optimum lowers the stopping length by the steps of a call):
    # its tokens are the first of transformers'. Every other path makes them all.
    width = min(got.shape[1], expected.shape[1])
    same = torch.equal(got[:, :width], expected[:, :width])
    result["checks"]["tokens"] = {"difference": 0 if same else 1, "tolerance": 0}
    assert same, f"tokens differ: {got.tolist()} vs plain transformers' {expected.tolist()}"
    if kv_cache:
        assert width == got.shape[1] and width > 1 + steps, (got.shape, expected.shape)
    else:
        assert got.shape == expected.shape, (got.shape, expected.shape)
    if hasattr(pipelined, "destroy"):
        pipelined.destroy()


def _folders(reports: Path) -> list[str]:
    return [p.name for p in reports.iterdir() if p.is_dir()] if reports.is_dir() else []


def main(reports: str, results_file: str, *only: str):
    reports_dir = Path(reports)
    results = {}
    for name, spec in families().items():
        if only and name not in only:
            continue
        results[name] = {path: {"ran": False, "checks": {}, "error": None, "reports": []}
                         for path in spec["paths"]}
        steps = []
        if "train" in spec["paths"]:
            steps.append((("train", "evaluate"), lambda out, mark, s=spec, r=results[name]:
                          train_and_evaluate(s, r["train"], r["evaluate"], out, mark)))
        for path in ("generate", "kv_cache", "kv_cache_cond"):
            if path in spec["paths"]:
                steps.append(((path,), lambda out, mark, s=spec, r=results[name], p=path:
                              generate(s, r[p], p)))
        for paths, step in steps:
            seen = set(_folders(reports_dir))

            def mark(path, seen=seen, family=results[name]):
                """The report folders the path's models made: those new since the last mark."""
                made = sorted(set(_folders(reports_dir)) - seen)
                family[path]["reports"] = made
                seen.update(made)

            with tempfile.TemporaryDirectory() as out:
                try:
                    step(out, mark)
                except Exception as error:  # noqa: BLE001 - recorded, the next path runs
                    for path in paths:
                        if results[name][path]["error"] is None:
                            results[name][path]["error"] = (
                                f"{type(error).__name__}: {error}\n{traceback.format_exc()}")
            if len(paths) == 1:
                mark(paths[0])
            print(name, {p: ("ok" if results[name][p]["ran"] and not results[name][p]["error"]
                             else "FAILED") for p in paths}, flush=True)
    Path(results_file).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
