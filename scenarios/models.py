"""Reference models for the scenarios: ResNet-50 v1.5 and BERT-Large, in plain torch.

The scenarios need full-size, realistic workloads to simulate, without depending on torchvision
or transformers. Both models are written to be traceable by torch.fx (no data-dependent control
flow, no unpacking of tensor shapes), so the PopTorch shim can split them at their blocks. Neither
imports ``poptorch`` at module level: the BERT IPU placement imports it lazily, so this module
also works under plain torch.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["resnet50", "bert_large", "synthetic_resnet_batch", "synthetic_bert_batch",
           "ResNet", "Bottleneck", "BertForPretraining"]


# --------------------------------------------------------------------------------------------
# ResNet-50 v1.5
# --------------------------------------------------------------------------------------------

class Bottleneck(nn.Module):
    """A ResNet bottleneck block: 1x1 reduce, 3x3 (carrying the stride, as in v1.5), 1x1 expand.

    The shortcut is a strided 1x1 conv + BatchNorm when the shape changes, else the identity.
    ReLUs are not in-place so that a block boundary never sees an in-place write.
    """

    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        super().__init__()
        out_channels = channels * self.expansion
        self.conv1 = nn.Conv2d(in_channels, channels, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.conv3 = nn.Conv2d(channels, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """A bottleneck ResNet classifier whose forward also computes the training loss.

    ``forward(images, labels)`` returns ``(logits, loss)`` in training mode when labels are given,
    so that ``poptorch.trainingModel`` finds the loss among the outputs; otherwise the logits.
    """

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000,
                 width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1))
        stages = []
        in_channels = width
        for index, blocks in enumerate(layers):
            channels = width * 2 ** index
            stride = 1 if index == 0 else 2
            stage = []
            for block in range(blocks):
                stage.append(Bottleneck(in_channels, channels, stride if block == 0 else 1))
                in_channels = channels * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.layers = nn.ModuleList(stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None):
        x = self.stem(images)
        for stage in self.layers:
            x = stage(x)
        logits = self.fc(torch.flatten(self.pool(x), 1))
        if self.training and labels is not None:
            return logits, F.cross_entropy(logits, labels)
        return logits


def resnet50(num_classes: int = 1000, width: int = 64,
             layers: tuple[int, ...] = (3, 4, 6, 3)) -> nn.Module:
    """ResNet-50 v1.5 (25,557,032 parameters by default).

    ``width`` (channels after the stem) and ``layers`` (blocks per stage) shrink it for tests,
    e.g. ``resnet50(10, width=8, layers=(1, 1, 1, 1))``.
    """
    return ResNet(tuple(layers), num_classes=num_classes, width=width)


# --------------------------------------------------------------------------------------------
# BERT-Large for pretraining (masked LM + next-sentence prediction)
# --------------------------------------------------------------------------------------------

class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, vocab_size: int, hidden: int, max_positions: int, type_vocab_size: int,
                 dropout: float, eps: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        # torch.arange (not a sliced buffer) so that torch.fx can trace the sequence length.
        positions = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Multi-head self-attention with separate Q, K, V and output projections."""

    def __init__(self, hidden: int, heads: int, dropout: float):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of the {heads} heads")
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) -> (batch, heads, seq, head_dim)."""
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        q = self._split_heads(self.query(x))
        k = self._split_heads(self.key(x))
        v = self._split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_bias
        probs = self.dropout(torch.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).transpose(1, 2).flatten(2)
        return self.output(context)


class BertLayer(nn.Module):
    """One post-LayerNorm encoder layer: attention, residual + LayerNorm, GELU FFN, residual +
    LayerNorm.

    ``checkpoint``, when set, is applied to the layer's output
    (``poptorch.recomputationCheckpoint``), so that recomputation in the backward pass restarts
    from each layer's output.
    """

    def __init__(self, hidden: int, heads: int, intermediate: int, dropout: float, eps: float):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads, dropout)
        self.attention_dropout = nn.Dropout(dropout)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_dropout = nn.Dropout(dropout)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)
        self.checkpoint = None

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention_dropout(self.attention(x, mask_bias)))
        ffn = self.output(F.gelu(self.intermediate(x)))
        x = self.output_norm(x + self.output_dropout(ffn))
        if self.checkpoint is not None:
            x = self.checkpoint(x)
        return x


class BertPooler(nn.Module):
    """Dense + tanh on the first ([CLS]) token: the input of the next-sentence head."""

    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(sequence[:, 0]))


class BertPretrainingHeads(nn.Module):
    """The masked-LM head (dense, GELU, LayerNorm, then a decoder tied to the word embeddings)
    on the first ``max_masked_tokens`` positions, and the next-sentence head on the pooled output.

    As in Graphcore's BERT, the masked tokens are expected at the start of the sequence, so the
    vocabulary-sized decoder runs on ``max_masked_tokens`` positions only, not the whole sequence.
    """

    def __init__(self, word_embeddings: nn.Embedding, hidden: int, max_masked_tokens: int,
                 eps: float):
        super().__init__()
        self.max_masked_tokens = max_masked_tokens
        self.transform = nn.Linear(hidden, hidden)
        self.transform_norm = nn.LayerNorm(hidden, eps=eps)
        # Tied weight: the decoder reuses the word embedding matrix (not registered twice).
        self._word_embeddings = [word_embeddings]
        self.decoder_bias = nn.Parameter(torch.zeros(word_embeddings.num_embeddings))
        self.seq_relationship = nn.Linear(hidden, 2)

    def forward(self, sequence: torch.Tensor,
                pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        masked = sequence[:, :self.max_masked_tokens]
        masked = self.transform_norm(F.gelu(self.transform(masked)))
        mlm_logits = F.linear(masked, self._word_embeddings[0].weight, self.decoder_bias)
        return mlm_logits, self.seq_relationship(pooled)


class BertForPretraining(nn.Module):
    """A BERT encoder with masked-LM and next-sentence heads, computing the pretraining loss.

    ``forward(input_ids, attention_mask, token_type_ids, masked_lm_labels, next_sentence_labels)``
    returns ``(mlm_logits, nsp_logits, loss)`` in training mode when both labels are given (loss =
    MLM cross-entropy ignoring label -100 + NSP cross-entropy), else ``(mlm_logits, nsp_logits)``.
    ``masked_lm_labels`` has shape (batch, max_masked_tokens): labels of the first positions.
    """

    def __init__(self, vocab_size: int = 30528, hidden: int = 1024, layers: int = 24,
                 heads: int = 16, intermediate: int = 4096, max_positions: int = 512,
                 max_masked_tokens: int = 20, dropout: float = 0.1, type_vocab_size: int = 2,
                 layer_norm_eps: float = 1e-12, return_mlm_logits: bool = True):
        super().__init__()
        self.return_mlm_logits = return_mlm_logits
        self.embeddings = BertEmbeddings(vocab_size, hidden, max_positions, type_vocab_size,
                                         dropout, layer_norm_eps)
        self.encoder = nn.ModuleList(
            BertLayer(hidden, heads, intermediate, dropout, layer_norm_eps) for _ in range(layers))
        self.pooler = BertPooler(hidden)
        self.heads = BertPretrainingHeads(self.embeddings.word_embeddings, hidden,
                                          max_masked_tokens, layer_norm_eps)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """BERT's initialisation: normal(0, 0.02) weights, zero biases, unit LayerNorm."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor, masked_lm_labels: torch.Tensor | None = None,
                next_sentence_labels: torch.Tensor | None = None):
        x = self.embeddings(input_ids, token_type_ids)
        # 1 = attend, 0 = padding; padding gets a large negative bias before the softmax.
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.encoder:
            x = layer(x, mask_bias)
        pooled = self.pooler(x)
        mlm_logits, nsp_logits = self.heads(x, pooled)
        if not (self.training and masked_lm_labels is not None
                and next_sentence_labels is not None):
            return mlm_logits, nsp_logits
        mlm_loss = F.cross_entropy(mlm_logits.flatten(0, 1).float(), masked_lm_labels.flatten(),
                                   ignore_index=-100)
        nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_labels.flatten())
        return (mlm_logits if self.return_mlm_logits else None), nsp_logits, mlm_loss + nsp_loss


def bert_large(vocab_size: int = 30528, hidden: int = 1024, layers: int = 24, heads: int = 16,
               intermediate: int = 4096, max_positions: int = 512,
               ipu_layout: tuple[int, ...] | None = None, *, max_masked_tokens: int = 20,
               dropout: float = 0.1, recompute_checkpoint: bool = False,
               return_mlm_logits: bool = True) -> nn.Module:
    """BERT-Large for pretraining (about 336 million parameters by default; see
    :class:`BertForPretraining` for its inputs and outputs).

    ``ipu_layout`` gives the number of encoder layers on each IPU, e.g. ``(3, 7, 7, 7)``
    (Graphcore's BERT-Large phase-1 layout on 4 IPUs, ``layers_per_ipu`` of ``pretrain_large_128``
    in nlp/bert/pytorch/configs_pretraining.yml); the parts are then wrapped in
    ``poptorch.BeginBlock``: embeddings on IPU 0, encoder layers in order over the IPUs, pooler
    and heads back on IPU 0.
    This follows ``PipelinedBertForPretraining.parallelize`` in graphcore/examples
    (nlp/bert/pytorch/modeling.py), which keeps the pooler and classifier heads on IPU 0 beside
    the word embedding they share a weight with. Because the last block returns to IPU 0, run it,
    as Graphcore does, with ``PipelinedExecution(AutoStage.AutoIncrement)``: ``SameAsIpu``
    would put the heads in the first stage, before the encoder they read.

    ``recompute_checkpoint`` adds ``poptorch.recomputationCheckpoint`` on every encoder layer's
    output (skipped where poptorch, or its ``recomputationCheckpoint``, is not available).
    """
    model = BertForPretraining(vocab_size, hidden, layers, heads, intermediate, max_positions,
                               max_masked_tokens=max_masked_tokens, dropout=dropout,
                               return_mlm_logits=return_mlm_logits)
    if ipu_layout is None and not recompute_checkpoint:
        return model
    try:
        import poptorch  # lazily: only placement and checkpoints need it
    except ImportError:
        if ipu_layout is not None:
            raise
        return model  # plain torch: there is nothing to checkpoint for

    if recompute_checkpoint:
        checkpoint = getattr(poptorch, "recomputationCheckpoint", None)
        if checkpoint is not None:
            for layer in model.encoder:
                layer.checkpoint = checkpoint
    if ipu_layout is not None:
        if sum(ipu_layout) != layers or any(n < 0 for n in ipu_layout):
            raise ValueError(f"ipu_layout {tuple(ipu_layout)} must place all {layers} encoder "
                             "layers (non-negative counts per IPU)")
        layer_ipus = [ipu for ipu, count in enumerate(ipu_layout) for _ in range(count)]
        poptorch.BeginBlock(model.embeddings, "Embedding", ipu_id=0)
        for index, (layer, ipu) in enumerate(zip(model.encoder, layer_ipus)):
            poptorch.BeginBlock(layer, f"Encoder{index}", ipu_id=ipu)
        # Graphcore: "Pooler --> IPU 0", "Classifier --> IPU 0" (modeling.py, parallelize()).
        poptorch.BeginBlock(model.pooler, "Pooler", ipu_id=0)
        poptorch.BeginBlock(model.heads, "Classifier", ipu_id=0)
    return model


# --------------------------------------------------------------------------------------------
# Synthetic batches
# --------------------------------------------------------------------------------------------

def synthetic_resnet_batch(batch: int, image_size: int = 224, num_classes: int = 1000,
                           seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ``(images, labels)``: float32 (batch, 3, size, size) and int64 (batch,)."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, image_size, image_size, generator=generator)
    labels = torch.randint(0, num_classes, (batch,), generator=generator)
    return images, labels


def synthetic_bert_batch(batch: int, seq_len: int = 128, vocab_size: int = 30528,
                         max_masked_tokens: int = 20, seed: int = 0
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                    torch.Tensor]:
    """Random BERT pretraining inputs, all int64, in forward's order: ``(input_ids,
    attention_mask, token_type_ids, masked_lm_labels, next_sentence_labels)``.

    Shapes: (batch, seq_len) for the first three, (batch, max_masked_tokens) for the MLM labels
    (a few set to -100, as for sequences with fewer masked tokens), (batch,) for the NSP labels.
    """
    if max_masked_tokens > seq_len:
        raise ValueError(f"max_masked_tokens {max_masked_tokens} > seq_len {seq_len}")
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (batch, seq_len), generator=generator)
    # Each sequence is a sentence pair padded at the end: lengths between half and all of seq_len.
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch, 1), generator=generator)
    positions = torch.arange(seq_len).unsqueeze(0)
    attention_mask = (positions < lengths).long()
    token_type_ids = ((positions >= lengths // 2) & (positions < lengths)).long()
    masked_lm_labels = torch.randint(0, vocab_size, (batch, max_masked_tokens),
                                     generator=generator)
    unused = torch.rand(batch, max_masked_tokens, generator=generator) < 0.1
    masked_lm_labels = masked_lm_labels.masked_fill(unused, -100)
    next_sentence_labels = torch.randint(0, 2, (batch,), generator=generator)
    return input_ids, attention_mask, token_type_ids, masked_lm_labels, next_sentence_labels
