"""GPT-2 pipelined by optimum-graphcore generates greedily, unmodified: random
weights from a small config, random token ids, no hub access. In fp32 its tokens
are those of transformers' own greedy search on the CPU."""
import torch
from optimum.graphcore import IPUConfig
from optimum.graphcore.modeling_utils import to_pipelined
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    cpu = GPT2LMHeadModel(config).eval()
    model = GPT2LMHeadModel(config).eval()
    model.load_state_dict(cpu.state_dict())
    ipu_config = IPUConfig(layers_per_ipu=[1, 1], ipus_per_replica=2,
                           inference_device_iterations=1)
    pipelined = to_pipelined(model, ipu_config.eval()).parallelize(for_generation=True).eval()
    prompt = torch.randint(0, config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    generated = pipelined.generate(prompt, attention_mask=torch.ones_like(prompt),
                                   max_length=12, do_sample=False, pad_token_id=0)
    expected = cpu.generate(prompt, attention_mask=torch.ones_like(prompt), max_length=12,
                            do_sample=False, pad_token_id=0)
    assert torch.equal(generated, expected), (generated, expected)
    print("generated", tuple(generated.shape), "tokens, as transformers' greedy search")


if __name__ == "__main__":
    main()
