"""A pipelined BERT pre-trained through optimum-graphcore's IPUTrainer, unmodified:
random weights from a small config, random token ids, no hub access."""
import sys

import torch
from optimum.graphcore import IPUConfig, IPUTrainer, IPUTrainingArguments
from transformers import BertConfig, BertForPreTraining


class RandomPretraining(torch.utils.data.Dataset):
    """Masked-LM and next-sentence examples of random token ids."""

    def __init__(self, size: int, sequence: int, vocab: int):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, vocab, (size, sequence), generator=generator)
        self.labels = torch.where(torch.rand(size, sequence, generator=generator) < 0.15,
                                  self.ids, torch.full_like(self.ids, -100))
        self.next = torch.randint(0, 2, (size,), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]),
                "token_type_ids": torch.zeros_like(self.ids[i]), "labels": self.labels[i],
                "next_sentence_label": self.next[i]}


def main(output_dir: str, size: str):
    torch.manual_seed(0)
    if size == "large":  # BERT-Large as optimum-graphcore's bert-large-ipu config lays it out
        config, layers_per_ipu, sequence = BertConfig(
            hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
            intermediate_size=4096), [3, 7, 7, 7], 128
    else:
        config, layers_per_ipu, sequence = BertConfig(
            vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64), [1, 1], 16
    large = size == "large"
    model = BertForPreTraining(config)
    ipu_config = IPUConfig(layers_per_ipu=layers_per_ipu, ipus_per_replica=len(layers_per_ipu),
                           gradient_accumulation_steps=16, device_iterations=1,
                           embedding_serialization_factor=2,
                           projection_serialization_factor=2,
                           recompute_checkpoint_every_layer=large,
                           optimizer_state_offchip=large)
    args = IPUTrainingArguments(output_dir=output_dir, max_steps=2,
                                per_device_train_batch_size=2, learning_rate=1e-3,
                                dataloader_drop_last=True, fp32=not large, report_to=[],
                                save_strategy="no", logging_steps=1)
    trainer = IPUTrainer(model=model, ipu_config=ipu_config, args=args,
                         train_dataset=RandomPretraining(64, sequence, config.vocab_size))
    result = trainer.train()
    print("trained", result.global_step, "steps, loss", round(result.training_loss, 3))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
