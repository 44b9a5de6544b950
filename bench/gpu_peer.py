#!/usr/bin/env python3
"""gpu_peer.py - the peers of bench/gpu, measured with Hugging Face
transformers and accelerate on the same model and budget as strata.

  gpu_peer.py make DIR [mid]        write the 7.5 GB llama of GPU-MACHINE.md
                                    (random bf16 weights, 4 safetensors
                                    shards), or with `mid` a 1.2 GB one of
                                    the same family (bench_multi's GPUs)
  gpu_peer.py accelerate DIR BUDGET [TOKENS] [decode]
                                    one forward pass of each of TOKENS
                                    (default 1,128) with accelerate offload,
                                    max_memory BUDGET on GPU 0 and the rest
                                    in host memory; with `decode`, also
                                    decode ms/token (KV cache, 16 steps)
  gpu_peer.py resident DIR [TOKENS] passes of each of TOKENS (default
                                    1,128; sdpa attention) and decode
                                    ms/token, whole model on GPU 0
  gpu_peer.py drop DIR              evict DIR's files from the page cache
  gpu_peer.py direct DIR            read DIR's shards with O_DIRECT, 16 MiB
                                    at a time: the disk's rate

Each measurement prints one line starting with "json " for bench/gpu.
"""
import json
import os
import statistics
import sys
import time

SHAPE = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=16,
             num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
             max_position_embeddings=4096, rms_norm_eps=1e-5,
             rope_theta=10000.0, tie_word_embeddings=False)
MID = dict(SHAPE, hidden_size=2048, intermediate_size=5632,
           num_hidden_layers=12, num_attention_heads=16,
           num_key_value_heads=4)
PASSES = 5


def emit(**kv):
    print("json " + json.dumps(kv), flush=True)


def make(d, shape=SHAPE):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(**shape)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.save_pretrained(d, max_shard_size="2GB", safe_serialization=True)
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"wrote {d}: {n / 1e9:.3f} GB of bf16 weights")


def tokens(n):
    import torch
    g = torch.Generator().manual_seed(n)
    return torch.randint(0, SHAPE["vocab_size"], (1, n), generator=g).cuda()


def timed_passes(model, n):
    import torch
    ids = tokens(n)
    times = []
    with torch.no_grad():
        for p in range(PASSES + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(ids, use_cache=False)
            torch.cuda.synchronize()
            if p:  # the first pass warms up
                times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def decode_ms(model, steps):
    """Median ms of one decode step with the KV cache, after a one-token
    prompt (what strata's decode_ms measures)."""
    import torch
    times = []
    with torch.no_grad():
        out = model(tokens(1), use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def accelerate(d, budget, sizes=(1, 128), decode=False):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.bfloat16, device_map="auto",
        max_memory={0: budget, "cpu": "100GiB"})
    model.eval()
    for n in sizes:
        torch.cuda.reset_peak_memory_stats()
        ms = timed_passes(model, n)
        emit(peer="accelerate", budget=budget, tokens=n, pass_ms=ms,
             device_peak_bytes=torch.cuda.max_memory_allocated())
    if decode:
        torch.cuda.reset_peak_memory_stats()
        emit(peer="accelerate", budget=budget, decode_ms=decode_ms(model, 16),
             steps=16, device_peak_bytes=torch.cuda.max_memory_allocated())


def resident(d, sizes=(1, 128), steps=64):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.bfloat16, device_map={"": 0},
        attn_implementation="sdpa")
    model.eval()
    ids = tokens(1)
    for n in sizes:
        emit(peer="transformers", tokens=n, pass_ms=timed_passes(model, n))
    times = []
    with torch.no_grad():
        out = model(ids, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    emit(peer="transformers", decode_ms=statistics.median(times) * 1e3,
         steps=steps)


def drop(d):
    for name in sorted(os.listdir(d)):
        fd = os.open(os.path.join(d, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def direct(d):
    import mmap
    buf = mmap.mmap(-1, 16 << 20)
    total, t0 = 0, time.perf_counter()
    for name in sorted(os.listdir(d)):
        if not name.endswith(".safetensors"):
            continue
        fd = os.open(os.path.join(d, name), os.O_RDONLY | os.O_DIRECT)
        try:
            while True:
                n = os.readv(fd, [buf])
                total += n
                if n < len(buf):
                    break
        finally:
            os.close(fd)
    emit(bytes=total, seconds=time.perf_counter() - t0)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, d = sys.argv[1], sys.argv[2]
    if cmd == "make":
        make(d, MID if sys.argv[3:] == ["mid"] else SHAPE)
    elif cmd == "accelerate" and 4 <= len(sys.argv) <= 6:
        rest = sys.argv[4:]
        sizes = (1, 128)
        if rest and rest[0] != "decode":
            sizes = tuple(int(t) for t in rest.pop(0).split(","))
        if rest not in ([], ["decode"]):
            sys.exit(__doc__)
        accelerate(d, sys.argv[3], sizes, rest == ["decode"])
    elif cmd == "resident" and len(sys.argv) <= 4:
        sizes = (1, 128)
        if len(sys.argv) == 4:
            sizes = tuple(int(t) for t in sys.argv[3].split(","))
        resident(d, sizes)
    elif cmd == "drop":
        drop(d)
    elif cmd == "direct":
        direct(d)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
