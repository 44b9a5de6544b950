#!/usr/bin/env python3
"""make_fuzz_seeds.py - writes the small seed corpora of the checkpoint
fuzzers (tests/fuzz/corpus/fuzz_gguf, fuzz_safetensors): valid files that
reach every part of each parser, kept under 64 KiB each; and of the block
coder fuzzer (fuzz_quant): per block type, two blocks of bytes to decode
and N(0, 0.05) values to encode (byte 0 the type, byte 1 the direction);
and of the server's request bodies (fuzz_http_body: byte 0 the endpoint,
odd for chat, then the JSON body). Pure Python."""
import json
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
GG = os.path.join(ROOT, "tests/fuzz/corpus/fuzz_gguf")
ST = os.path.join(ROOT, "tests/fuzz/corpus/fuzz_safetensors")
QU = os.path.join(ROOT, "tests/fuzz/corpus/fuzz_quant")
HB = os.path.join(ROOT, "tests/fuzz/corpus/fuzz_http_body")
# strata_block_type order (include/strata/base.h): name, elements, bytes
BLOCKS = [("F32", 1, 4), ("F16", 1, 2), ("BF16", 1, 2), ("Q8_0", 32, 34),
          ("Q4_0", 32, 18), ("Q4_1", 32, 20), ("Q5_0", 32, 22), ("Q5_1", 32, 24),
          ("Q2_K", 256, 84), ("Q3_K", 256, 110), ("Q4_K", 256, 144),
          ("Q5_K", 256, 176), ("Q6_K", 256, 210), ("IQ4_NL", 32, 18),
          ("IQ4_XS", 256, 136)]


def quant_seeds():
    import random
    rng = random.Random(5)
    os.makedirs(QU, exist_ok=True)
    for t, (name, be, bb) in enumerate(BLOCKS):
        dec = bytes([t, 0]) + bytes(rng.getrandbits(8) for _ in range(2 * bb))
        n = max(be, 8)
        enc = bytes([t, 1]) + b"".join(struct.pack("<f", rng.gauss(0, 0.05))
                                       for _ in range(n))
        for kind, data in (("decode", dec), ("encode", enc)):
            with open(os.path.join(QU, f"{kind}-{name}"), "wb") as f:
                f.write(data)


def http_body_seeds():
    """Bodies reaching every field of /v1/completions and
    /v1/chat/completions, accepted and refused."""
    os.makedirs(HB, exist_ok=True)
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Once upon a time"},
            {"role": "assistant", "content": "there was a dog."},
            {"role": "user", "content": "And then?"}]
    completions = {
        "prompt-string": {"model": "m", "prompt": "Once upon a time",
                          "max_tokens": 8, "temperature": 0},
        "prompt-ids": {"prompt": [1, 403, 407, 261], "max_tokens": 4},
        "prompt-nested-ids": {"prompt": [[1, 403]], "n": 1},
        "prompt-one-string": {"prompt": ["Lily"], "seed": 7, "top_k": 3},
        "prompt-two-strings": {"prompt": ["a", "b"]},
        "stream-usage": {"prompt": "Tom", "stream": True,
                         "stream_options": {"include_usage": True},
                         "top_p": 0.9, "min_p": 0.05},
        "stop-array": {"prompt": "The cat", "stop": ["\n", "cat", "sat"],
                       "max_completion_tokens": 5},
        "stop-empty": {"prompt": "x", "stop": [""]},
        "max-tokens-zero": {"prompt": "x", "max_tokens": 0},
        "temperature-huge": {"prompt": "x", "temperature": 1e300},
        "id-out-of-vocab": {"prompt": [1, 99999]},
        "nulls": {"prompt": "x", "max_tokens": None, "stop": None,
                  "seed": None, "stream": None},
        "unknown-fields": {"prompt": "x", "logprobs": 2, "user": "u",
                           "frequency_penalty": 0.5},
    }
    chats = {
        "chat-turns": {"messages": msgs, "max_tokens": 16},
        "chat-stream": {"messages": msgs[1:2], "stream": True, "stop": "."},
        "chat-bad-role": {"messages": [{"role": "bot", "content": "x"}]},
        "chat-content-parts": {"messages": [{"role": "user", "content":
                               [{"type": "text", "text": "Hi"}]}]},
        "chat-empty": {"messages": []},
        "chat-no-content": {"messages": [{"role": "user"}]},
    }
    raw = {"duplicate-keys": (0, b'{"prompt": "a", "prompt": "b"}'),
           "not-object": (0, b'[1, 2]'),
           "truncated": (1, b'{"messages": [{"role": "user", "con')}
    for name, body in completions.items():
        raw[name] = (0, json.dumps(body).encode())
    for name, body in chats.items():
        raw[name] = (1, json.dumps(body).encode())
    for name, (endpoint, body) in raw.items():
        with open(os.path.join(HB, name), "wb") as f:
            f.write(bytes([endpoint]) + body)


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def kv(key, t, payload):
    return s(key) + struct.pack("<I", t) + payload


def gguf(version, kvs, tensors, align=32):
    """tensors: (name, dims, ggml_type, nbytes)"""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    off = 0
    infos = b""
    for name, dims, t, nbytes in tensors:
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", t, off)
        off += (nbytes + align - 1) // align * align
    out += infos
    out += b"\0" * ((-len(out)) % align)
    return out + bytes(i % 251 for i in range(off))


def main():
    os.makedirs(GG, exist_ok=True)
    os.makedirs(ST, exist_ok=True)
    kvs = [kv("general.architecture", 8, s("llama")),
           kv("llama.block_count", 4, struct.pack("<I", 1)),
           kv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
           kv("general.flag", 7, b"\x01"),
           kv("a.i64", 11, struct.pack("<q", -5)),
           kv("a.f64", 12, struct.pack("<d", 0.5)),
           kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("<s>") + s("a") + s("\xe2\x96\x81b")),
           kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0, -1, -2)),
           kv("a.nested", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 2, 1) + b"\x07\x00"
              + struct.pack("<IQ", 0, 2) + b"\x01\x02")]
    tensors = [("token_embd.weight", [8, 4], 0, 128),
               ("blk.0.attn_q.weight", [32, 2], 8, 68),
               ("blk.0.ffn_up.weight", [256, 1], 12, 144),
               ("output_norm.weight", [8], 1, 16)]
    seeds = {
        "v3-mixed.gguf": gguf(3, kvs, tensors),
        "v2-mixed.gguf": gguf(2, kvs, tensors),
        "vocab-only.gguf": gguf(3, kvs[:1] + kvs[6:8], []),
        "align64.gguf": gguf(3, [kv("general.alignment", 4, struct.pack("<I", 64))] + kvs[:2],
                             tensors[:2], align=64),
    }
    for name, data in seeds.items():
        with open(os.path.join(GG, name), "wb") as f:
            f.write(data)

    def st(tensors, meta=None):
        hdr, off, data = {}, 0, b""
        if meta is not None:
            hdr["__metadata__"] = meta
        for name, dtype, shape, nbytes in tensors:
            hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
            off += nbytes
            data += bytes(i % 253 for i in range(nbytes))
        h = json.dumps(hdr).encode()
        h += b" " * ((-len(h)) % 8)
        return struct.pack("<Q", len(h)) + h + data
    sts = {
        "mixed.safetensors": st([("a", "F32", [2, 2], 16), ("b", "BF16", [3], 6), ("c", "I8", [], 1),
                                 ("d", "F4", [4], 2), ("e", "F6_E2M3", [4], 3), ("f", "U8", [0], 0)],
                                {"format": "pt"}),
        "null-meta.safetensors": st([("model.layers.0.q.weight", "F16", [2, 4], 16)], None),
        "empty.safetensors": st([]),
    }
    for name, data in sts.items():
        with open(os.path.join(ST, name), "wb") as f:
            f.write(data)
    quant_seeds()
    http_body_seeds()


if __name__ == "__main__":
    sys.exit(main())
