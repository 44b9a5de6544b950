#!/usr/bin/env python3
"""make_moe_bench_model.py - a Qwen3-30B-A3B-shaped mixture-of-experts
checkpoint with random bf16 weights, for bench/gpu-moe (issue 22).

    python3 tools/make_moe_bench_model.py DIR [--layers 8] [--seed 0]
        [--experts 128] [--experts-used 8] [--vocab 151936]

Qwen3-30B-A3B's shape (hidden 2048, 32 query and 4 key/value heads of
128, 128 experts of width 768, 8 routed per token, vocabulary 151936,
q/k norms, renormalised top-k) with fewer layers (default 8 of 48), so
the folder is about 11 GB and a bench runs in a minute: per layer 1.21 GB
of experts and 38 MB of attention, 622 MB of embedding and output.
Written as Hugging Face names strata reads (one tensor per expert,
model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight), one
safetensors shard per layer plus one for the rest, with
model.safetensors.index.json and config.json. No tokenizer: strata bench
and llama-bench use token ids. Weights are N(0, 0.02) (norms 1), drawn on
the GPU when there is one. Needs torch and safetensors, or else numpy
(the shards then written by this script: a JSON header and the bf16
bytes, rounded to nearest even), so a machine without torch makes a
smaller one for the CPU (`--layers 2 --vocab 32000`, about 2.7 GB, where
the output head no longer outweighs a token's experts; fewer --experts
keep the shape of each). The weights drawn differ between the two paths (other
generators); their distribution does not.
"""
import argparse
import json
import os
import struct

SHAPE = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
}


def config(layers, shape):
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_hidden_layers": layers,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
        **shape,
    }


class NumpyDraw:
    """N(0, 0.02) bf16 tensors and a safetensors writer without torch."""

    def __init__(self, seed):
        import numpy as np
        self.np = np
        self.rng = np.random.default_rng(seed)

    def rand(self, *shape):
        np = self.np
        f = (self.rng.standard_normal(shape, dtype=np.float32) * 0.02).view(np.uint32)
        # round to nearest even, as torch's .to(bfloat16)
        f = f + (0x7FFF + ((f >> 16) & 1))
        return (f >> 16).astype(np.uint16)

    def ones(self, n):
        return self.np.full((n,), 0x3F80, dtype=self.np.uint16)

    @staticmethod
    def save(path, tensors):
        header, at = {"__metadata__": {"format": "pt"}}, 0
        for k, v in tensors.items():
            header[k] = {"dtype": "BF16", "shape": list(v.shape),
                         "data_offsets": [at, at + v.nbytes]}
            at += v.nbytes
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for v in tensors.values():
                f.write(v.tobytes())

    @staticmethod
    def nbytes(v):
        return v.nbytes


class TorchDraw:
    """N(0, 0.02) bf16 tensors drawn on the GPU when there is one."""

    def __init__(self, seed):
        import torch
        from safetensors.torch import save_file
        self.torch = torch
        self.save_file = save_file
        self.dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.g = torch.Generator(device=self.dev).manual_seed(seed)

    def rand(self, *shape):
        torch = self.torch
        t = torch.randn(*shape, generator=self.g, device=self.dev, dtype=torch.float32)
        return (t * 0.02).to(torch.bfloat16).cpu().contiguous()

    def ones(self, n):
        return self.torch.ones(n, dtype=self.torch.bfloat16)

    def save(self, path, tensors):
        self.save_file(tensors, path, metadata={"format": "pt"})

    @staticmethod
    def nbytes(v):
        return v.numel() * v.element_size()


def drawer(seed):
    try:
        return TorchDraw(seed)
    except ImportError:
        return NumpyDraw(seed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--experts", type=int, default=SHAPE["num_experts"])
    ap.add_argument("--vocab", type=int, default=SHAPE["vocab_size"])
    ap.add_argument("--experts-used", type=int,
                    default=SHAPE["num_experts_per_tok"])
    a = ap.parse_args()
    if a.layers < 1 or a.vocab < 1 or not 1 <= a.experts_used <= a.experts:
        ap.error("give --layers >= 1, --vocab >= 1 and "
                 "1 <= --experts-used <= --experts")
    s = dict(SHAPE, num_experts=a.experts, num_experts_per_tok=a.experts_used,
             vocab_size=a.vocab)
    d = drawer(a.seed)
    rand, ones = d.rand, d.ones
    H, D, E, F = s["hidden_size"], s["head_dim"], s["num_experts"], s["moe_intermediate_size"]
    q, kv = s["num_attention_heads"] * D, s["num_key_value_heads"] * D

    os.makedirs(a.dir, exist_ok=True)
    index, total = {}, 0

    def shard(name, tensors):
        nonlocal total
        d.save(os.path.join(a.dir, name), tensors)
        for k, v in tensors.items():
            index[k] = name
            total += d.nbytes(v)

    n = a.layers + 1
    shard(f"model-00001-of-{n:05d}.safetensors", {
        "model.embed_tokens.weight": rand(s["vocab_size"], H),
        "model.norm.weight": ones(H),
        "lm_head.weight": rand(s["vocab_size"], H),
    })
    for l in range(a.layers):
        p = f"model.layers.{l}."
        t = {
            p + "input_layernorm.weight": ones(H),
            p + "post_attention_layernorm.weight": ones(H),
            p + "self_attn.q_proj.weight": rand(q, H),
            p + "self_attn.k_proj.weight": rand(kv, H),
            p + "self_attn.v_proj.weight": rand(kv, H),
            p + "self_attn.o_proj.weight": rand(H, q),
            p + "self_attn.q_norm.weight": ones(D),
            p + "self_attn.k_norm.weight": ones(D),
            p + "mlp.gate.weight": rand(E, H),
        }
        for e in range(E):
            x = f"{p}mlp.experts.{e}."
            t[x + "gate_proj.weight"] = rand(F, H)
            t[x + "up_proj.weight"] = rand(F, H)
            t[x + "down_proj.weight"] = rand(H, F)
        shard(f"model-{l + 2:05d}-of-{n:05d}.safetensors", t)
        print(f"layer {l + 1} of {a.layers} written", flush=True)
    with open(os.path.join(a.dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": index}, f, indent=1)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(config(a.layers, s), f, indent=2)
    print(f"wrote {a.dir}: {total / 1e9:.3f} GB of bf16 weights, {a.layers} layers")


if __name__ == "__main__":
    main()
