#!/usr/bin/env python3
"""make_family_models.py - tiny random checkpoints of the families beyond
llama/mistral/qwen2 (Qwen3, Gemma 2, Gemma 3 text, Phi-3, and the
mixture-of-experts families Mixtral, Qwen2-MoE, Qwen3-MoE) with
transformers' float64 logits and greedy generations, for the infer layer's
family tests (tests/data/families/).

Run where torch and transformers are installed (the GPU machine); it
computes on the CPU in float64, so the reference does not depend on TF32,
GPU kernels or float32 rounding:

    PYTHONUNBUFFERED=1 python3 tools/make_family_models.py OUTDIR [NAME...]

For each model OUTDIR/<name>/ receives:
  config.json        as transformers writes it (plus torch_dtype / head_dim
                     when absent)
  model.safetensors  weights in the model's stored dtype
  logits.f64         float64 little-endian [len(tokens), vocab]: logits of
                     every position of `tokens`, computed in float64 from the
                     stored weights (upcast exactly)
  reference.json     tokens, the greedy continuation (32 tokens) computed in
                     float64, the top-1 minus top-2 margin at each step, the
                     stored tensor names, and what the model exercises

Weights are drawn with a larger spread than transformers' default init so
logits are peaked and greedy margins wide (see make_reference_models.py).
Gemma's norms compute x * (1 + w): their weights are drawn around 0 so the
scale is non-trivial either way. Every run with the same versions writes
the same files.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

TOKENS = 12
GREEDY_NEW = 32


def base(d):
    return dict(vocab_size=d.get("vocab", 256), hidden_size=d["hidden"],
                intermediate_size=d["inter"], num_hidden_layers=d["layers"],
                num_attention_heads=d["heads"],
                num_key_value_heads=d["kv"], max_position_embeddings=256,
                rms_norm_eps=d.get("eps", 1e-6),
                tie_word_embeddings=d["tied"], bos_token_id=1,
                eos_token_id=2)


def qwen3(d):
    kw = base(d)
    kw.update(head_dim=d["head_dim"], rope_theta=d.get("theta", 1e6),
              use_sliding_window=False)
    return transformers.Qwen3Config(**kw), transformers.Qwen3ForCausalLM


def gemma2(d):
    kw = base(d)
    kw.update(head_dim=d["head_dim"],
              query_pre_attn_scalar=d["query_pre_attn_scalar"],
              attn_logit_softcapping=d["attn_softcap"],
              final_logit_softcapping=d["final_softcap"],
              sliding_window=d["window"], rope_theta=10000.0,
              hidden_activation="gelu_pytorch_tanh")
    return transformers.Gemma2Config(**kw), transformers.Gemma2ForCausalLM


def gemma3(d):
    kw = base(d)
    kw.update(head_dim=d["head_dim"],
              query_pre_attn_scalar=d["query_pre_attn_scalar"],
              sliding_window=d["window"],
              hidden_activation="gelu_pytorch_tanh")
    n = d["layers"]
    kw["layer_types"] = ["full_attention" if (i + 1) % d["pattern"] == 0
                         else "sliding_attention" for i in range(n)]
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:
        kw["rope_parameters"] = {
            "full_attention": {"rope_type": "default",
                               "rope_theta": d["theta_global"]},
            "sliding_attention": {"rope_type": "default",
                                  "rope_theta": d["theta_local"]}}
    else:
        kw["rope_theta"] = d["theta_global"]
        kw["rope_local_base_freq"] = d["theta_local"]
    return (transformers.Gemma3TextConfig(**kw),
            transformers.Gemma3ForCausalLM)


def phi3(d):
    kw = base(d)
    kw.update(rope_theta=10000.0, pad_token_id=0,
              original_max_position_embeddings=d.get("orig", 256))
    if d.get("longrope"):
        half = d["hidden"] // d["heads"] // 2
        kw["rope_scaling"] = {
            "type": "longrope",
            "short_factor": [1.0 + 0.5 * i for i in range(half)],
            "long_factor": [2.0 + 1.0 * i for i in range(half)]}
    return transformers.Phi3Config(**kw), transformers.Phi3ForCausalLM


def mixtral(d):
    kw = base(d)
    kw.update(num_local_experts=d["experts"],
              num_experts_per_tok=d["top_k"], rope_theta=1e6,
              sliding_window=None)
    return transformers.MixtralConfig(**kw), transformers.MixtralForCausalLM


def qwen3_moe(d):
    kw = base(d)
    kw.update(head_dim=d["head_dim"], num_experts=d["experts"],
              num_experts_per_tok=d["top_k"],
              moe_intermediate_size=d["moe_inter"],
              norm_topk_prob=d["norm_topk"], decoder_sparse_step=1,
              mlp_only_layers=[], rope_theta=1e6, use_sliding_window=False)
    return (transformers.Qwen3MoeConfig(**kw),
            transformers.Qwen3MoeForCausalLM)


def qwen2_moe(d):
    kw = base(d)
    kw.update(num_experts=d["experts"], num_experts_per_tok=d["top_k"],
              moe_intermediate_size=d["moe_inter"],
              shared_expert_intermediate_size=d["shared_inter"],
              norm_topk_prob=d["norm_topk"], decoder_sparse_step=1,
              mlp_only_layers=[], rope_theta=1e6, use_sliding_window=False)
    return (transformers.Qwen2MoeConfig(**kw),
            transformers.Qwen2MoeForCausalLM)


# name, maker, stored dtype, dims. Odd sizes on purpose; windows smaller
# than the 12-token test so sliding layers differ from global ones.
MODELS = [
    ("qwen3_f32", qwen3, "float32",
     dict(hidden=48, inter=104, heads=4, kv=2, head_dim=16, layers=3,
          tied=False)),
    ("qwen3_tied_bf16", qwen3, "bfloat16",
     dict(hidden=32, inter=64, heads=4, kv=1, head_dim=8, layers=2,
          tied=True)),
    ("gemma2_f32", gemma2, "float32",
     dict(hidden=48, inter=96, heads=4, kv=2, head_dim=16, layers=4,
          tied=True, query_pre_attn_scalar=24, attn_softcap=5.0,
          final_softcap=12.0, window=4)),
    ("gemma3_f32", gemma3, "float32",
     dict(hidden=48, inter=96, heads=4, kv=2, head_dim=16, layers=4,
          tied=True, query_pre_attn_scalar=16, window=4, pattern=2,
          theta_local=10000.0, theta_global=1000000.0)),
    ("gemma3_bf16", gemma3, "bfloat16",
     dict(hidden=32, inter=64, heads=2, kv=1, head_dim=16, layers=3,
          tied=True, query_pre_attn_scalar=16, window=5, pattern=3,
          theta_local=10000.0, theta_global=1000000.0)),
    ("phi3_f32", phi3, "float32",
     dict(hidden=64, inter=112, heads=4, kv=4, layers=3, tied=False)),
    ("phi3_longrope_f32", phi3, "float32",
     dict(hidden=48, inter=96, heads=4, kv=2, layers=2, tied=False,
          longrope=True, orig=64)),
    ("mixtral_f32", mixtral, "float32",
     dict(hidden=32, inter=48, heads=4, kv=2, layers=2, tied=False,
          experts=4, top_k=2)),
    ("qwen3_moe_f32", qwen3_moe, "float32",
     dict(hidden=32, inter=64, heads=4, kv=2, head_dim=8, layers=2,
          tied=False, experts=6, top_k=2, moe_inter=24, norm_topk=True)),
    ("qwen3_moe_unnorm_bf16", qwen3_moe, "bfloat16",
     dict(hidden=32, inter=64, heads=4, kv=2, head_dim=8, layers=2,
          tied=True, experts=4, top_k=2, moe_inter=16, norm_topk=False)),
    ("qwen2_moe_shared_f32", qwen2_moe, "float32",
     dict(hidden=32, inter=64, heads=4, kv=2, layers=2, tied=False,
          experts=4, top_k=2, moe_inter=16, shared_inter=40,
          norm_topk=False)),
]


def randomise(model, seed, gemma):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name or "layernorm" in name:
                p.copy_((0.0 if gemma else 1.0) + 0.25 * r)
            elif name.endswith("bias"):
                p.copy_(0.3 * r)
            elif "embed_tokens" in name:
                p.copy_(r)
            elif p.dim() >= 2:
                p.copy_(r * (1.5 / np.sqrt(p.shape[-1])))
            else:
                p.copy_(0.3 * r)


def logits_of(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long))
    return out.logits[0]


def greedy(model, prompt, n):
    ids, margins = list(prompt), []
    for _ in range(n):
        last = logits_of(model, ids)[-1]
        top = torch.topk(last, 2).values
        margins.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(last)))
    return ids[len(prompt):], margins


def build(outdir, index, name, maker, dtype, d):
    torch.manual_seed(2000 + index)
    cfg, cls = maker(d)
    model = cls(cfg)
    randomise(model, 2000 + index, name.startswith("gemma"))
    tdtype = getattr(torch, dtype)
    model = model.to(tdtype)
    mdir = os.path.join(outdir, name)
    os.makedirs(mdir, exist_ok=True)
    model.save_pretrained(mdir)
    p = os.path.join(mdir, "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    cpath = os.path.join(mdir, "config.json")
    with open(cpath) as f:
        c = json.load(f)
    c.setdefault("torch_dtype", dtype)
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")

    stored = load_file(os.path.join(mdir, "model.safetensors"))
    # Eager everything: the grouped expert products have no float64 kernel.
    try:
        ref = cls.from_pretrained(mdir, dtype=torch.float64,
                                  attn_implementation="eager",
                                  experts_implementation="eager")
    except (TypeError, ValueError):
        ref = cls.from_pretrained(mdir, dtype=torch.float64,
                                  attn_implementation="eager")
    ref.eval()
    rng = np.random.default_rng(11 + index)
    tokens = [1] + [int(t) for t in rng.integers(3, cfg.vocab_size,
                                                 TOKENS - 1)]
    logits = logits_of(ref, tokens)
    assert torch.isfinite(logits).all(), name
    np.asarray(logits.numpy(), dtype="<f8").tofile(
        os.path.join(mdir, "logits.f64"))
    gen, margins = greedy(ref, tokens, GREEDY_NEW)
    info = {
        "family": cfg.model_type, "dtype": dtype, "tied": d["tied"],
        "vocab": cfg.vocab_size, "tokens": tokens,
        "greedy_prompt": tokens, "greedy": gen,
        "greedy_margin": [round(m, 6) for m in margins],
        "min_greedy_margin": round(min(margins), 6),
        "max_abs_logit": round(float(logits.abs().max()), 4),
        "tensors": {k: [str(v.dtype).replace("torch.", ""), list(v.shape)]
                    for k, v in sorted(stored.items())},
        "transformers": transformers.__version__, "torch": torch.__version__,
    }
    with open(os.path.join(mdir, "reference.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"{name}: {cfg.model_type} layers {d['layers']} "
          f"tensors {len(stored)} max|logit| {info['max_abs_logit']} "
          f"min greedy margin {info['min_greedy_margin']}")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: make_family_models.py OUTDIR [NAME...]")
    torch.set_num_threads(4)
    torch.use_deterministic_algorithms(True)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    want = set(sys.argv[2:])
    failed = 0
    for i, (name, maker, dtype, d) in enumerate(MODELS):
        if want and name not in want:
            continue
        try:
            build(sys.argv[1], i, name, maker, dtype, d)
        except Exception:
            import traceback
            traceback.print_exc()
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
