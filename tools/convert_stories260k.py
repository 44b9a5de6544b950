#!/usr/bin/env python3
"""convert_stories260k.py - build the Hugging Face layout of stories260K.

Runs where torch, transformers, tokenizers, sentencepiece and safetensors are
installed (the GPU machine). Reads Karpathy's llama2.c checkpoint
(stories260K.bin, format version 0) and its SentencePiece model (tok512.model),
and writes into OUTDIR:

  config.json, generation_config.json, model.safetensors (F32),
  tokenizer.json, tokenizer_config.json       the HF layout strata reads
  reference.json                               token ids, greedy text check
  logits.f32                                   float32 [tokens, vocab] logits

Checks before writing anything: greedy generation from BOS over 200 positions
with transformers must reproduce the known-good llama2.c output byte for byte,
and the fast tokenizer must agree with sentencepiece on the prompts used.

usage: convert_stories260k.py LLAMA2C_BIN TOK512_MODEL GREEDY_TXT OUTDIR
"""
import json
import os
import struct
import sys

import numpy as np
import torch


def read_llama2c(path):
    """Returns (config dict, dict of numpy arrays) in llama2.c's layout."""
    with open(path, "rb") as f:
        dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack(
            "7i", f.read(28))
        shared = vocab > 0
        vocab = abs(vocab)
        data = np.frombuffer(f.read(), dtype="<f4")
    head = dim // heads
    kv_dim = kv_heads * head
    shapes = [
        ("tok", (vocab, dim)),
        ("rms_att", (layers, dim)),
        ("wq", (layers, dim, dim)),
        ("wk", (layers, kv_dim, dim)),
        ("wv", (layers, kv_dim, dim)),
        ("wo", (layers, dim, dim)),
        ("rms_ffn", (layers, dim)),
        ("w1", (layers, hidden, dim)),
        ("w2", (layers, dim, hidden)),
        ("w3", (layers, hidden, dim)),
        ("rms_final", (dim,)),
        ("freq_real", (seq, head // 2)),
        ("freq_imag", (seq, head // 2)),
    ]
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    out, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = data[off:off + n].reshape(shape).copy()
        off += n
    if off != data.size:
        raise SystemExit(f"{path}: {data.size - off} floats left over")
    cfg = dict(dim=dim, hidden=hidden, layers=layers, heads=heads,
               kv_heads=kv_heads, vocab=vocab, seq=seq, shared=shared)
    return cfg, out


def to_rotate_half(w, n_heads):
    """llama.c rotates interleaved pairs (0,1),(2,3)...; HF rotates halves
    (i, i + d/2). Reorder each head's output rows so both agree."""
    rows, cols = w.shape
    hd = rows // n_heads
    return (w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3)
            .reshape(rows, cols))


def build_model(cfg, w, outdir):
    from safetensors.numpy import save_file
    tensors = {"model.embed_tokens.weight": w["tok"],
               "model.norm.weight": w["rms_final"]}
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = w["rms_att"][i]
        tensors[p + "post_attention_layernorm.weight"] = w["rms_ffn"][i]
        tensors[p + "self_attn.q_proj.weight"] = to_rotate_half(
            w["wq"][i], cfg["heads"])
        tensors[p + "self_attn.k_proj.weight"] = to_rotate_half(
            w["wk"][i], cfg["kv_heads"])
        tensors[p + "self_attn.v_proj.weight"] = w["wv"][i]
        tensors[p + "self_attn.o_proj.weight"] = w["wo"][i]
        tensors[p + "mlp.gate_proj.weight"] = w["w1"][i]
        tensors[p + "mlp.down_proj.weight"] = w["w2"][i]
        tensors[p + "mlp.up_proj.weight"] = w["w3"][i]
    if not cfg["shared"]:
        tensors["lm_head.weight"] = w["wcls"]
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32)
               for k, v in tensors.items()}
    save_file(tensors, os.path.join(outdir, "model.safetensors"),
              metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg["dim"],
        "intermediate_size": cfg["hidden"],
        "num_hidden_layers": cfg["layers"],
        "num_attention_heads": cfg["heads"],
        "num_key_value_heads": cfg["kv_heads"],
        "head_dim": cfg["dim"] // cfg["heads"],
        "vocab_size": cfg["vocab"],
        "max_position_embeddings": cfg["seq"],
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": cfg["shared"],
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    gen = {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False,
           "max_length": cfg["seq"]}
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")


def spm_merges(sp):
    """BPE merges implied by a SentencePiece BPE vocabulary: every split of a
    piece into two pieces of the vocabulary, ranked by the merged piece's
    score (highest first), ties by the ids of the two halves - the rule HF's
    SentencePiece extractor uses."""
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for i in range(sp.get_piece_size()):
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i):
            continue
        piece, score = sp.id_to_piece(i), sp.get_score(i)
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)
    return vocab, [(a, b) for a, b, _ in merges]


def build_tokenizer(spm_path, outdir):
    """A tokenizer.json equal in behaviour to SentencePiece's, in the form
    transformers' Llama converter gives (legacy Llama-2 style)."""
    import sentencepiece as spm
    from tokenizers import (AddedToken, Tokenizer, decoders, models,
                            normalizers, processors)
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    vocab, merges = spm_merges(sp)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>",
                               fuse_unk=True, byte_fallback=True))
    # tok512's normalizer is the identity rule with remove_extra_whitespaces:
    # no leading or trailing spaces, runs of spaces collapsed to one. Llama
    # 2's own model does not remove them, so transformers' converter has no
    # such step; here it is needed to match sentencepiece.
    from tokenizers import Regex
    tok.normalizer = normalizers.Sequence([
        normalizers.Replace(Regex("^ +| +$"), ""),
        normalizers.Replace(Regex(" {2,}"), " "),
        normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(),
        decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t in ("<unk>", "<s>", "</s>")])
    tok.save(os.path.join(outdir, "tokenizer.json"))
    tcfg = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False,
        "model_max_length": 512, "legacy": True,
        "clean_up_tokenization_spaces": False,
    }
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
        f.write("\n")
    return tok


def llama2c_decode(prev, piece):
    """How llama2.c prints a token: the space after BOS is dropped and
    <0xNN> pieces print their byte."""
    if prev == 1 and piece.startswith("\u2581"):
        piece = piece[1:]
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    bin_path, spm_path, greedy_path, outdir = sys.argv[1:]
    os.makedirs(outdir, exist_ok=True)
    cfg, w = read_llama2c(bin_path)
    build_model(cfg, w, outdir)
    fast = build_tokenizer(spm_path, outdir)

    from transformers import AutoModelForCausalLM
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    model = AutoModelForCausalLM.from_pretrained(
        outdir, torch_dtype=torch.float32).eval()

    # Greedy from BOS over 200 positions, as llama2.c's test does.
    with torch.no_grad():
        ids = [1]
        out = b""
        for _ in range(200):
            logits = model(torch.tensor([ids])).logits[0, -1]
            nxt = int(torch.argmax(logits))
            if nxt == 1:
                break
            out += llama2c_decode(ids[-1], sp.id_to_piece(nxt))
            ids.append(nxt)
    expected = open(greedy_path, "rb").read()
    if out != expected:
        raise SystemExit("greedy output differs from llama2.c's:\n%r\n%r"
                         % (out[:200], expected[:200]))

    checks = ["Once upon a time", " leading space", "two  spaces",
              "Lily's mom said, \"Lily, let's go!\"", "caf\u00e9 \u263a x\n"]
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    proto.ParseFromString(open(spm_path, "rb").read())
    ns = proto.normalizer_spec
    print("normalizer:", ns.name, "dummy prefix", ns.add_dummy_prefix,
          "remove_extra_whitespaces", ns.remove_extra_whitespaces)
    bad = []
    for text in checks + ["tab\there", "  many   spaces  ", "\uff21\ufb01"]:
        got, want = fast.encode(text).ids, [1] + sp.encode(text)
        if got != want:
            bad.append(f"{text!r}: tokenizer.json {got} != sentencepiece {want}")
    if bad:
        raise SystemExit("\n".join(bad))
    prompt = "Once upon a time, there was a little girl named Lily."
    enc = fast.encode(prompt).ids
    with torch.no_grad():
        logits = model(torch.tensor([enc])).logits[0].float().numpy()
    logits.astype("<f4").tofile(os.path.join(outdir, "logits.f32"))
    ref_doc = {
        "prompt": prompt,
        "prompt_ids": enc,
        "logits_file": "logits.f32",
        "logits_shape": list(logits.shape),
        "greedy_200_from_bos_matches_llama2c": True,
        "greedy_200_ids": ids,
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
    }
    with open(os.path.join(outdir, "reference.json"), "w") as f:
        json.dump(ref_doc, f, indent=1)
        f.write("\n")
    print("ok: greedy matches llama2.c; prompt ids", enc)


if __name__ == "__main__":
    main()
