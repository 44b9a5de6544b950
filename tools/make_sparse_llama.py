#!/usr/bin/env python3
"""make_sparse_llama.py - write a llama-shaped safetensors checkpoint whose
payload is a sparse hole: real headers and real file sizes, no real weights.

`strata plan` reads headers only, so such a directory plans exactly like
the real model of that shape (sizes, windows, KV cache, predictions) at no
disk cost. Not runnable: the weights read back as zeros.

--fill writes every payload byte instead (small finite random values, one
random 1 MiB pattern repeated), so the file really occupies the disk: what
the load benchmark (bench/bench_load.sh) reads cold and warm.

usage: make_sparse_llama.py DIR [--dim 4096] [--ffn 14336] [--layers 16]
           [--heads 32] [--kv-heads 8] [--vocab 32000] [--context 4096]
           [--dtype BF16|F16|F32] [--tied] [--fill]
Defaults are the 7.5 GB peer model of shared/GPU-MACHINE.md.
"""
import argparse
import json
import os
import random
import struct

SIZES = {"BF16": 2, "F16": 2, "F32": 4}


def pattern(dtype, nbytes):
    """nbytes of finite values in (-0.05, 0.05) of dtype, seeded."""
    rng = random.Random(1234)
    vals = [rng.uniform(-0.05, 0.05) for _ in range(nbytes // SIZES[dtype])]
    if dtype == "F32":
        return struct.pack(f"<{len(vals)}f", *vals)
    if dtype == "F16":
        return struct.pack(f"<{len(vals)}e", *vals)
    f32 = struct.unpack(f"<{len(vals)}I", struct.pack(f"<{len(vals)}f", *vals))
    return struct.pack(f"<{len(vals)}H", *(v >> 16 for v in f32))


def fill(path, nbytes, dtype):
    block = pattern(dtype, 1 << 20)
    with open(path, "ab") as f:
        while nbytes > 0:
            n = min(nbytes, len(block))
            f.write(block[:n])
            nbytes -= n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--dtype", default="BF16", choices=sorted(SIZES))
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--fill", action="store_true")
    a = ap.parse_args()
    hd = a.dim // a.heads
    header, off = {"__metadata__": {"format": "pt"}}, 0

    def add(name, shape):
        nonlocal off
        n = SIZES[a.dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": a.dtype, "shape": shape,
                        "data_offsets": [off, off + n]}
        off += n

    add("model.embed_tokens.weight", [a.vocab, a.dim])
    add("model.norm.weight", [a.dim])
    if not a.tied:
        add("lm_head.weight", [a.vocab, a.dim])
    for layer in range(a.layers):
        p = f"model.layers.{layer}."
        add(p + "input_layernorm.weight", [a.dim])
        add(p + "self_attn.q_proj.weight", [a.heads * hd, a.dim])
        add(p + "self_attn.k_proj.weight", [a.kv_heads * hd, a.dim])
        add(p + "self_attn.v_proj.weight", [a.kv_heads * hd, a.dim])
        add(p + "self_attn.o_proj.weight", [a.dim, a.heads * hd])
        add(p + "post_attention_layernorm.weight", [a.dim])
        add(p + "mlp.gate_proj.weight", [a.ffn, a.dim])
        add(p + "mlp.up_proj.weight", [a.ffn, a.dim])
        add(p + "mlp.down_proj.weight", [a.dim, a.ffn])
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
    if a.fill:
        fill(path, off, a.dtype)
    os.truncate(path, 8 + len(text) + off)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": a.dim, "intermediate_size": a.ffn,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads, "vocab_size": a.vocab,
        "max_position_embeddings": a.context, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": a.tied,
    }
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
