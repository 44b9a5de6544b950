#!/usr/bin/env python3
"""make_checkpoint_testdata.py - writes tiny checkpoints with the real tools
(transformers save_pretrained, safetensors save_file) and the catalog facts
strata's checkpoint tests compare against, as one tar.gz under $OUT.

Run on a machine with torch, transformers and safetensors (the GPU machine;
no GPU is needed). Unpack the result into tests/data/checkpoints/.

Facts come from the libraries, not from strata: dtype and shape from
safetensors.safe_open, config values from the transformers config object,
parameter counts from the model. Byte offsets come from the header as the
safetensors format defines them (8-byte length, JSON, data section).
"""
import json
import os
import struct
import sys
import tarfile

import torch
import transformers
import safetensors
from safetensors import safe_open
from safetensors.torch import save_file

OUT = os.environ.get("OUT", "out")
WORK = os.path.join(OUT, "checkpoints")
torch.manual_seed(0)


def header_offsets(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    base = 8 + n
    return base, {k: (base + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0])
                  for k, v in hdr.items() if k != "__metadata__"}


def catalog_facts(d):
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    tensors = []
    for fn in files:
        path = os.path.join(d, fn)
        base, offs = header_offsets(path)
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                off, nbytes = offs[k]
                tensors.append({"name": k, "dtype": sl.get_dtype(),
                                "shape": list(sl.get_shape()), "file": fn,
                                "offset": off, "bytes": nbytes})
    tensors.sort(key=lambda t: (t["file"], t["offset"]))
    return {"files": [{"name": fn, "size": os.path.getsize(os.path.join(d, fn))}
                      for fn in files],
            "tensors": tensors,
            "total_bytes": sum(t["bytes"] for t in tensors)}


def config_facts(cfg, model):
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    theta = getattr(cfg, "rope_theta", None)
    if theta is None and isinstance(rope, dict):
        theta = rope.get("rope_theta")
    return {
        "model_type": cfg.model_type,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        "vocab_size": cfg.vocab_size,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": theta,
        "rope": rope if isinstance(rope, dict) else None,
        "tie_word_embeddings": bool(cfg.tie_word_embeddings),
        "max_position_embeddings": cfg.max_position_embeddings,
        "sliding_window": getattr(cfg, "sliding_window", None),
        "num_parameters": model.num_parameters(),
    }


def save_model(name, cfg, dtype, shard=None):
    d = os.path.join(WORK, name)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype)
    kw = {"safe_serialization": True}
    if shard:
        kw["max_shard_size"] = shard
    try:
        model.save_pretrained(d, **kw)
    except TypeError:
        kw.pop("safe_serialization")
        model.save_pretrained(d, **kw)
    for extra in ("generation_config.json",):
        p = os.path.join(d, extra)
        if os.path.exists(p):
            os.remove(p)
    facts = catalog_facts(d)
    facts["config"] = config_facts(cfg, model)
    facts["sharded"] = os.path.exists(os.path.join(d, "model.safetensors.index.json"))
    return facts


def mixed_dtypes():
    d = os.path.join(WORK, "mixed-dtypes")
    os.makedirs(d, exist_ok=True)
    t = {
        "f64": torch.randn(3, 2, dtype=torch.float64),
        "f32": torch.randn(5, dtype=torch.float32),
        "f16": torch.randn(2, 3, 4).half(),
        "bf16": torch.randn(7).bfloat16(),
        "i64": torch.arange(4, dtype=torch.int64),
        "i32": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "i16": torch.arange(3, dtype=torch.int16),
        "i8": torch.arange(-4, 4, dtype=torch.int8),
        "u8": torch.arange(9, dtype=torch.uint8).reshape(3, 3),
        "bool": torch.tensor([True, False, True]),
        "f8_e4m3": torch.randn(4).to(torch.float8_e4m3fn),
        "f8_e5m2": torch.randn(4).to(torch.float8_e5m2),
        "scalar": torch.tensor(1.5),
        "empty": torch.zeros(0, 3),
    }
    for name, dt in (("u16", "uint16"), ("u32", "uint32"), ("u64", "uint64")):
        if hasattr(torch, dt):
            t[name] = torch.arange(3).to(getattr(torch, dt))
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt", "note": "strata"})
    facts = catalog_facts(d)
    # values to check payload reads and f32 conversion against
    facts["values"] = {k: [float(x) for x in t[k].float().flatten().tolist()]
                       for k in ("f32", "f16", "bf16")}
    facts["sharded"] = False
    return facts


def run(expected, name, fn):
    """One model; a failure is recorded and printed, the others still run."""
    import traceback
    try:
        expected[name] = fn()
    except Exception:
        traceback.print_exc()
        expected.setdefault("failed", []).append(name)


def main():
    os.makedirs(WORK, exist_ok=True)
    expected = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "safetensors": safetensors.__version__}}
    llama = transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    run(expected, "tiny-llama", lambda: save_model("tiny-llama", llama, torch.bfloat16))
    qwen = transformers.Qwen2Config(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)
    run(expected, "tiny-qwen2-sharded",
        lambda: save_model("tiny-qwen2-sharded", qwen, torch.float16, shard="8KB"))
    mistral = transformers.MistralConfig(
        vocab_size=48, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        sliding_window=32, tie_word_embeddings=False)
    run(expected, "tiny-mistral", lambda: save_model("tiny-mistral", mistral, torch.float32))
    run(expected, "mixed-dtypes", mixed_dtypes)
    with open(os.path.join(WORK, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    with tarfile.open(os.path.join(OUT, "checkpoints.tar.gz"), "w:gz") as tf:
        tf.add(WORK, arcname="checkpoints")
    for root, _, files in os.walk(WORK):
        for fn in files:
            p = os.path.join(root, fn)
            print(os.path.relpath(p, WORK), os.path.getsize(p))
    import shutil
    shutil.rmtree(WORK)


if __name__ == "__main__":
    sys.exit(main())
