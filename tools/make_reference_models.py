#!/usr/bin/env python3
"""make_reference_models.py - tiny random llama/mistral/qwen2 checkpoints with
transformers' float32 logits and greedy generations, for the infer layer's
reference tests (tests/data/reference/).

Run where torch and transformers are installed (the GPU machine); it computes
on the CPU in float32 so the numbers do not depend on TF32 or GPU kernels:

    PYTHONUNBUFFERED=1 python3 tools/make_reference_models.py OUTDIR

For each model OUTDIR/<name>/ receives:
  config.json        as transformers writes it, plus the legacy keys
                     rope_theta / rope_scaling / torch_dtype when absent
  model.safetensors  weights in the model's stored dtype (f32, bf16 or f16)
  logits.f32         float32 little-endian [len(tokens), vocab]: logits of
                     every position of `tokens`, computed in float32 from the
                     stored weights (bf16/f16 upcast exactly)
  reference.json     tokens, the greedy continuation (32 tokens) of
                     greedy_prompt, the top-1 minus top-2 logit margin at
                     each greedy step, and what the model exercises

Weights are drawn with larger spread than transformers' default init (and
norm weights and biases are made non-trivial) so that logits are peaked and
greedy margins are wide: a test at 1e-3 then checks real arithmetic, not
near-ties. Every run with the same versions writes the same files.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

TOKENS = 12      # positions whose logits are recorded
GREEDY_NEW = 32  # greedy tokens generated after the prompt
MAJOR = int(transformers.__version__.split(".")[0])

# name, family, dtype, dims. Odd sizes on purpose (hidden 48, intermediate
# 136, 6 heads, vocab 250); GQA ratios 1, 2 and 4; tied and untied; more
# layers (5) than a host:2 window; mistral window 5 < the test context.
MODELS = [
    ("llama_gqa1_f32", "llama", "float32",
     dict(hidden=48, inter=136, heads=6, kv=6, layers=5, vocab=250,
          tied=False, eps=1e-5, theta=10000.0)),
    ("llama_gqa2_tied_bf16", "llama", "bfloat16",
     dict(hidden=48, inter=136, heads=6, kv=3, layers=3, vocab=256,
          tied=True, eps=1e-6, theta=10000.0)),
    ("llama_gqa4_f16", "llama", "float16",
     dict(hidden=64, inter=96, heads=8, kv=2, layers=3, vocab=256,
          tied=False, eps=1e-5, theta=500000.0)),
    ("llama_gqa2_f32", "llama", "float32",
     dict(hidden=32, inter=72, heads=4, kv=2, layers=2, vocab=200,
          tied=True, eps=1e-5, theta=10000.0)),
    ("llama3_rope_f32", "llama", "float32",
     dict(hidden=32, inter=80, heads=4, kv=2, layers=3, vocab=256,
          tied=True, eps=1e-5, theta=10000.0, llama3=True)),
    ("llama3_rope_bf16", "llama", "bfloat16",
     dict(hidden=48, inter=136, heads=6, kv=2, layers=4, vocab=256,
          tied=False, eps=1e-5, theta=10000.0, llama3=True)),
    ("mistral_window_f32", "mistral", "float32",
     dict(hidden=48, inter=136, heads=6, kv=2, layers=5, vocab=256,
          tied=False, eps=1e-5, theta=10000.0, window=5)),
    ("mistral_window_bf16", "mistral", "bfloat16",
     dict(hidden=32, inter=64, heads=4, kv=1, layers=3, vocab=256,
          tied=False, eps=1e-6, theta=1000000.0, window=4)),
    ("qwen2_bias_f32", "qwen2", "float32",
     dict(hidden=48, inter=136, heads=6, kv=2, layers=3, vocab=256,
          tied=False, eps=1e-6, theta=1000000.0)),
    ("qwen2_bias_tied_f16", "qwen2", "float16",
     dict(hidden=32, inter=88, heads=4, kv=4, layers=4, vocab=256,
          tied=True, eps=1e-6, theta=10000.0)),
]

LLAMA3 = dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0,
              high_freq_factor=4.0, original_max_position_embeddings=64)


def rope_params(d):
    """Rope settings in both the v5 (rope_parameters) and legacy forms."""
    scaling = dict(LLAMA3) if d.get("llama3") else None
    v5 = dict(scaling) if scaling else {"rope_type": "default"}
    v5["rope_theta"] = d["theta"]
    return v5, scaling


def make_config(family, d):
    cls = {"llama": transformers.LlamaConfig,
           "mistral": transformers.MistralConfig,
           "qwen2": transformers.Qwen2Config}[family]
    kw = dict(vocab_size=d["vocab"], hidden_size=d["hidden"],
              intermediate_size=d["inter"], num_hidden_layers=d["layers"],
              num_attention_heads=d["heads"],
              num_key_value_heads=d["kv"], max_position_embeddings=256,
              rms_norm_eps=d["eps"], tie_word_embeddings=d["tied"],
              bos_token_id=1, eos_token_id=2, hidden_act="silu")
    if family == "mistral":
        kw["sliding_window"] = d["window"]
    if family == "qwen2":
        kw["use_sliding_window"] = False
    v5, scaling = rope_params(d)
    if MAJOR >= 5:
        kw["rope_parameters"] = v5
    else:
        kw["rope_theta"] = d["theta"]
        if scaling:
            kw["rope_scaling"] = scaling
    return cls(**kw)


def model_class(family):
    return {"llama": transformers.LlamaForCausalLM,
            "mistral": transformers.MistralForCausalLM,
            "qwen2": transformers.Qwen2ForCausalLM}[family]


def expected_inv_freq(d):
    """The rotary frequencies computed here from the formulas, to check that
    transformers read the rope settings the way the C code will."""
    hd = d["hidden"] // d["heads"]
    inv = 1.0 / (d["theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    if not d.get("llama3"):
        return inv
    s = LLAMA3
    low_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for f in inv:
        wl = 2 * np.pi / f
        if wl < high_wl:
            out.append(f)
        elif wl > low_wl:
            out.append(f / s["factor"])
        else:
            sm = (s["original_max_position_embeddings"] / wl
                  - s["low_freq_factor"]) / (s["high_freq_factor"]
                                             - s["low_freq_factor"])
            out.append((1 - sm) * f / s["factor"] + sm * f)
    return np.array(out)


def randomise(model, seed):
    """Peaked, non-trivial weights: unit-ish embeddings, 1/sqrt(fan_in)
    matrices, norm weights around 1, biases around 0."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.25 * r)
            elif name.endswith("bias"):
                p.copy_(0.3 * r)
            elif "embed_tokens" in name:
                p.copy_(r)
            else:
                p.copy_(r * (1.5 / np.sqrt(p.shape[1])))


def logits_of(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long))
    return out.logits[0].to(torch.float32)


def greedy(model, prompt, n):
    ids, margins = list(prompt), []
    for _ in range(n):
        last = logits_of(model, ids)[-1]
        top = torch.topk(last, 2).values
        margins.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(last)))
    return ids[len(prompt):], margins


def fix_config(path, family, d, dtype):
    """Adds the legacy keys next to whatever transformers wrote, so readers
    of either generation of config.json find the rope settings."""
    with open(path) as f:
        cfg = json.load(f)
    v5, scaling = rope_params(d)
    cfg.setdefault("rope_theta", d["theta"])
    if scaling and not cfg.get("rope_scaling"):
        cfg["rope_scaling"] = scaling
    cfg.setdefault("torch_dtype", dtype)
    cfg.setdefault("head_dim", d["hidden"] // d["heads"])
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def build(outdir, index, name, family, dtype, d):
    torch.manual_seed(1000 + index)
    cfg = make_config(family, d)
    model = model_class(family)(cfg)
    randomise(model, 1000 + index)
    tdtype = getattr(torch, dtype)
    model = model.to(tdtype)
    mdir = os.path.join(outdir, name)
    os.makedirs(mdir, exist_ok=True)
    model.save_pretrained(mdir)
    for extra in ("generation_config.json",):
        p = os.path.join(mdir, extra)
        if os.path.exists(p):
            os.remove(p)
    fix_config(os.path.join(mdir, "config.json"), family, d, dtype)

    stored = load_file(os.path.join(mdir, "model.safetensors"))
    for k, v in stored.items():
        assert v.dtype == tdtype, (name, k, v.dtype)
    assert ("lm_head.weight" in stored) == (not d["tied"]), name

    # Reload in float32: every stored value upcast exactly.
    ref = model_class(family).from_pretrained(
        mdir, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    sd = ref.state_dict()
    for k, v in stored.items():
        assert torch.equal(sd[k], v.to(torch.float32)), (name, k)

    rot = getattr(ref.model, "rotary_emb", None)
    if rot is None or not hasattr(rot, "inv_freq"):
        print(f"WARNING {name}: no rotary_emb.inv_freq to check")
    else:
        inv = rot.inv_freq.double().numpy()
        want = expected_inv_freq(d)
        assert np.allclose(inv, want, rtol=1e-5), (name, inv, want)
        assert float(getattr(rot, "attention_scaling", 1.0)) == 1.0

    rng = np.random.default_rng(7 + index)
    tokens = [1] + [int(t) for t in rng.integers(3, d["vocab"], TOKENS - 1)]
    logits = logits_of(ref, tokens)
    assert torch.isfinite(logits).all()
    np.asarray(logits.numpy(), dtype="<f4").tofile(
        os.path.join(mdir, "logits.f32"))

    if family == "mistral":
        # The window must change late positions, or the test proves nothing.
        try:
            nowin = model_class(family).from_pretrained(
                mdir, dtype=torch.float32, attn_implementation="eager",
                sliding_window=None)
            late = (logits_of(nowin, tokens)[-1] - logits[-1]).abs().max()
            print(f"{name}: last-position change without the window "
                  f"{float(late):.4f}")
            if float(late) < 1e-2:
                print(f"WARNING {name}: sliding window had no effect")
        except Exception as e:  # a check only: keep the data
            print(f"WARNING {name}: window check failed: {e!r}")

    gen, margins = greedy(ref, tokens, GREEDY_NEW)
    info = {
        "family": family, "dtype": dtype, "tied": d["tied"],
        "vocab": d["vocab"], "tokens": tokens,
        "greedy_prompt": tokens, "greedy": gen,
        "greedy_margin": [round(m, 6) for m in margins],
        "min_greedy_margin": round(min(margins), 6),
        "max_abs_logit": round(float(logits.abs().max()), 4),
        "sliding_window": d.get("window"), "llama3_rope": bool(d.get("llama3")),
        "transformers": transformers.__version__, "torch": torch.__version__,
    }
    with open(os.path.join(mdir, "reference.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"{name}: vocab {d['vocab']} layers {d['layers']} "
          f"max|logit| {info['max_abs_logit']} "
          f"min greedy margin {info['min_greedy_margin']}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_reference_models.py OUTDIR")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(4)
    torch.use_deterministic_algorithms(True)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    failed = 0
    for i, (name, family, dtype, d) in enumerate(MODELS):
        try:
            build(sys.argv[1], i, name, family, dtype, d)
        except Exception:
            import traceback
            traceback.print_exc()
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
