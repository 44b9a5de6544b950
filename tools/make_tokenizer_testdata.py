#!/usr/bin/env python3
"""make_tokenizer_testdata.py - reference data for the text layer's tests.

Runs on a machine with Hugging Face `tokenizers` (Python). It:
  1. trains three small tokenizer.json files on public-domain text (the KJV
     Bible from Debian's bible-kjv, given as a gzip file) plus the
     multilingual stress strings, so that every component strata claims is
     exercised by a real HF-written file:
       bytelevel-l3   byte-level BPE, Llama-3 split regex (Split + ByteLevel
                      without regex), NFC normalizer, ignore_merges, added
                      tokens with lstrip / rstrip / single_word / normalized,
                      TemplateProcessing adding <|begin_of_text|>
       spm-bpe        SentencePiece-style BPE (Llama-2 layout): Prepend +
                      Replace normalizer, byte_fallback, fuse_unk, <0xNN>
                      byte tokens, Replace/ByteFallback/Fuse/Strip decoder
       spm-meta       the same model with a Metaspace pre-tokenizer
                      (prepend_scheme "first", split false) and Metaspace
                      decoder (Mistral-style)
  2. encodes a corpus of hard strings with those three and with the GPT-2
     and Llama-2 tokenizer.json files, with and without special tokens, and
     decodes the ids back (skip_special False and True);
  3. times HF `tokenizers` encoding the whole KJV text with GPT-2 and
     Llama-2, and records the id count and a SHA-256 of the ids (int32 LE),
     so the C bench can check it produced the same ids.

Invalid UTF-8: HF only takes str, so a byte string that is not valid UTF-8
is given as bytes.decode("utf-8", "replace") - each maximal invalid subpart
becomes U+FFFD - which is exactly what strata's encoder does with such input.

Usage: make_tokenizer_testdata.py KJV_GZ SHARED_TOKENIZERS_DIR INPUTS_JSON OUT_DIR
       make_tokenizer_testdata.py extra KJV_GZ TOKENIZERS_DIR INPUTS_JSON OUT_DIR
The second form (a later run) adds two more trained files - "falconish"
(Punctuation, ByteLevel with regex, Digits and a Split after ByteLevel;
NFKC, Lowercase, Replace by regex and Strip normalizers; ByteLevel
post-processor) and "wsplit" (WhitespaceSplit + Whitespace, NFD, unk with
fuse_unk, [CLS]/[SEP] template) - and edge strings (NEL, U+180E, U+0130,
final sigma, superscript digits, ...) through all seven tokenizers, into
expected_extra.json, leaving the first run's files as they are.
"""
import gzip
import hashlib
import json
import os
import struct
import sys
import time

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                        normalizers, pre_tokenizers, processors, trainers)

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
             r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_corpus(kjv_text, multilingual):
    lines = kjv_text.split("\n")[:12000]
    # Strip the "Ge1:1 " references: plain prose trains better merges.
    lines = [ln.split(" ", 1)[1] if " " in ln else ln for ln in lines]
    return lines + multilingual * 20


def make_bytelevel_l3(corpus):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated",
                             invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=3000, min_frequency=2, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([
        AddedToken("<tool>", lstrip=True, rstrip=False, normalized=False),
        AddedToken("</tool>", lstrip=False, rstrip=True, normalized=False),
        AddedToken("xyzzy", single_word=True, normalized=True),
        AddedToken("caf\u00e9!", normalized=True),
    ])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
        special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def spm_base(corpus):
    """Trains a BPE over Metaspace words, then rebuilds its vocab in the
    Llama-2 layout: <unk> <s> </s>, 256 <0xNN> byte tokens, then pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                 prepend_scheme="always",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=2500, min_frequency=2,
                                  special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    d = json.loads(tok.to_str())
    old = d["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(old.items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    d["model"]["vocab"] = vocab
    d["model"]["byte_fallback"] = True
    d["model"]["fuse_unk"] = True
    d["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
        for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    return d


def make_spm_bpe(corpus):
    d = spm_base(corpus)
    tok = Tokenizer.from_str(json.dumps(d))
    tok.normalizer = normalizers.Sequence([
        normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(),
        decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_tokens([AddedToken("<|user|>", rstrip=True, normalized=False)])
    return tok


def make_spm_meta(corpus):
    d = spm_base(corpus)
    tok = Tokenizer.from_str(json.dumps(d))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="first", split=False)
    tok.decoder = decoders.Metaspace(replacement="\u2581",
                                     prepend_scheme="first", split=False)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens(["[INST]", "[/INST]"])
    return tok


def hard_strings(multilingual):
    s = [
        "", " ", "  ", "\t", "\n", "\n\n\n", " \n \n", "\r\n", "a\r\nb",
        "Hello world", " Hello world", "Hello  world", "Hello   world  ",
        "   leading and trailing   ", "tabs\tand\t\tmore\ttabs",
        "line one\nline two\n\nline four\n",
        "I'm sure they'll say we've done it, isn't it? She'd KNOW'S",
        "1 12 123 1234 12345 123456 3.14159 1,000,000",
        "\u00c4pfel \u00fcber \u00df Stra\u00dfe na\u00efve caf\u00e9",
        "e\u0301 (combining acute) vs \u00e9 (precomposed)",
        "a\u0308\u0323 stacked marks, \u1e69 s-dot",
        "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 123",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
        "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u3067\u3059\u3002\ud55c\uad6d\uc5b4",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
        "\U0001F600\U0001F601 \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family",
        "\U0001F44D\U0001F3FD thumbs, \U0001F1EB\U0001F1F7 flag, \u2764\ufe0f",
        "\U00020000\U0002A6D6 astral han, \U0001D400\U0001D401 math",
        "mixed: English\u4e2d\u6587\u0420\u0443\u0441\u0441\u043a\u0438\u0439\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
        "code: for (int i = 0; i < n; ++i) { x[i] += y[i]; }",
        "    indented code\n\tif (a) {\n\t\treturn b;\n\t}",
        "!!!!!! ??? ... --- *** ### @@@",
        "<|begin_of_text|>Hello<|end_of_text|>",
        "text <|eot_id|> more text",
        "<s>start</s> and <unk> inside",
        "a<s>b",
        "say <tool>   call </tool>   done",
        "xyzzy is a word; axyzzyb is not; xyzzy.",
        "caf\u00e9! and cafe\u0301! both",
        "[INST] question [/INST] answer",
        "<|user|>   hello",
        "literal byte token text <0x41> <0xFF>",
        "\u2581 already has a metaspace \u2581\u2581",
        "\u00a0non-breaking\u00a0space\u2003em\u3000ideographic",
        "zero\u200bwidth\u200cjoiners\u200d",
        "\ufeffBOM at start",
        "\x00 NUL and \x07 bell and \x7f del",
        "\u00bd \u2153 \u2460 \u00b2 fractions and circled",
        "ALL CAPS SHOUTING and MiXeD cAsE",
        "https://example.com/path?q=1&r=two#frag",
    ]
    s += multilingual
    raw = [x.encode("utf-8") for x in s]
    raw += [b"\xff\xfe invalid", b"ok \xc3 truncated", b"\xe2\x82 cut euro",
            b"\xed\xa0\x80 surrogate", b"\xf0\x9f\x98 cut emoji",
            b"\xc0\xaf overlong", b"tail \xe2\x82"]
    return raw


def encode_cases(tok, raw_cases):
    out = []
    for raw in raw_cases:
        text = raw.decode("utf-8", "replace")
        plain = tok.encode(text, add_special_tokens=False).ids
        spec = tok.encode(text, add_special_tokens=True).ids
        out.append({
            "input_hex": raw.hex(),
            "ids": plain,
            "ids_special": spec,
            "decoded_hex": tok.decode(spec, skip_special_tokens=False)
                              .encode("utf-8").hex(),
            "decoded_skip_hex": tok.decode(spec, skip_special_tokens=True)
                                   .encode("utf-8").hex(),
        })
    return out


def time_encode(tok, text, reps=3):
    best = None
    ids = None
    for _ in range(reps):
        t0 = time.perf_counter()
        enc = tok.encode(text, add_special_tokens=False)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
        ids = enc.ids
    blob = b"".join(struct.pack("<i", i) for i in ids)
    return {"seconds_best_of_%d" % reps: best,
            "mb_per_s": len(text.encode("utf-8")) / best / 1e6,
            "bytes": len(text.encode("utf-8")),
            "ids": len(ids), "ids_sha256": hashlib.sha256(blob).hexdigest()}


def make_falconish(corpus):
    """Punctuation + ByteLevel(regex) + Digits + Split after ByteLevel,
    with NFKC, Lowercase, Replace(regex) and Strip normalizers."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([
        normalizers.NFKC(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[\t ]{3,}"), "  "),
        normalizers.Strip(left=False, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated",
                             invert=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000, min_frequency=2, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_wsplit(corpus):
    """WhitespaceSplit then Whitespace, NFD, a Metaspace-free word BPE with
    an unknown token and no byte fallback (unknowns fuse)."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True))
    tok.normalizer = normalizers.NFD()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Whitespace()])
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2,
                                  special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                  limit_alphabet=200, show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    return tok


EXTRA = [
    "\u0085 next line \x85x", "a\u180eb mongolian vs", "\u2028line\u2029para",
    "\u0130stanbul \u0130I i\u0307 \u03a3\u0391\u03a3 \u1e9e\u00df",
    "\u00b2\u00b3\u00b9 \u00bc\u00bd superscripts 2\u00b2", "\uff21\uff22 \ufb01ne \u2460",
    "x\t\t\t\ty     z   ", "1234567 12 3 4444 99999", "end.   ",
    "under_score snake_case_name __dunder__", "co\u00f6perate na\u0308ive",
    "\u0661\u0662\u0663 arabic digits \u0966\u0967", "mixed\u00a0nbsp\u3000ideo",
]


def main_extra():
    kjv_gz, shared, inputs_json, out = sys.argv[2:6]
    os.makedirs(out, exist_ok=True)
    kjv = gzip.open(kjv_gz, "rb").read().decode("utf-8")
    ml = [e["text"] for e in json.load(open(inputs_json))["inputs"]]
    corpus = train_corpus(kjv, ml)
    toks = {"falconish": make_falconish(corpus),
            "wsplit": make_wsplit(corpus)}
    for name, tok in toks.items():
        tok.save(os.path.join(out, name + ".tokenizer.json"))
        toks[name] = Tokenizer.from_file(os.path.join(out, name +
                                                      ".tokenizer.json"))
    for name in ["bytelevel-l3", "spm-bpe", "spm-meta"]:
        toks[name] = Tokenizer.from_file(os.path.join(
            shared, "generated", name + ".tokenizer.json"))
    toks["hf-gpt2"] = Tokenizer.from_file(
        os.path.join(shared, "hf-gpt2", "tokenizer.json"))
    toks["hf-llama2-spm-bpe"] = Tokenizer.from_file(
        os.path.join(shared, "hf-llama2-spm-bpe", "tokenizer.json"))
    extra = [x.encode("utf-8") for x in EXTRA]
    cases = hard_strings(ml) + extra
    import tokenizers
    expected = {"generator": "tools/make_tokenizer_testdata.py extra",
                "tokenizers_version": tokenizers.__version__,
                "tokenizers": {n: encode_cases(t, cases if n in
                                               ("falconish", "wsplit")
                                               else extra)
                               for n, t in toks.items()}}
    with open(os.path.join(out, "expected_extra.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
    for n, c in expected["tokenizers"].items():
        print(n, len(c), "cases")


def main():
    if sys.argv[1] == "extra":
        return main_extra()
    kjv_gz, shared, inputs_json, out = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    kjv = gzip.open(kjv_gz, "rb").read().decode("utf-8")
    ml = [e["text"] for e in json.load(open(inputs_json))["inputs"]]
    corpus = train_corpus(kjv, ml)
    toks = {
        "bytelevel-l3": make_bytelevel_l3(corpus),
        "spm-bpe": make_spm_bpe(corpus),
        "spm-meta": make_spm_meta(corpus),
    }
    for name, tok in toks.items():
        tok.save(os.path.join(out, name + ".tokenizer.json"))
        # Reload what was written, so expectations come from the file.
        toks[name] = Tokenizer.from_file(os.path.join(out, name +
                                                      ".tokenizer.json"))
    toks["hf-gpt2"] = Tokenizer.from_file(
        os.path.join(shared, "hf-gpt2", "tokenizer.json"))
    toks["hf-llama2-spm-bpe"] = Tokenizer.from_file(
        os.path.join(shared, "hf-llama2-spm-bpe", "tokenizer.json"))
    cases = hard_strings(ml)
    import tokenizers
    expected = {"generator": "tools/make_tokenizer_testdata.py",
                "tokenizers_version": tokenizers.__version__,
                "tokenizers": {n: encode_cases(t, cases)
                               for n, t in toks.items()}}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
    import platform
    bench = {"tokenizers_version": tokenizers.__version__,
             "cpu": platform.processor() or platform.machine(),
             "text": "KJV (bible -f Gen1:1-Rev22:21), whole text, one encode()",
             "hf-gpt2": time_encode(toks["hf-gpt2"], kjv),
             "hf-llama2-spm-bpe": time_encode(toks["hf-llama2-spm-bpe"], kjv)}
    with open(os.path.join(out, "bench_hf.json"), "w") as f:
        json.dump(bench, f, indent=1)
    print(json.dumps(bench, indent=1))
    for n, c in expected["tokenizers"].items():
        print(n, len(c), "cases")


if __name__ == "__main__":
    main()
