#!/usr/bin/env python3
"""make_continuation_testdata.py - reference data for streamed continuations.

Runs on a machine with Hugging Face `tokenizers` (Python). For every
tokenizer.json the text layer's tests use, it encodes a set of short hard
texts (a continuation starting with a space token, byte-fallback tokens, a
multi-byte character split across tokens, added and special tokens, runs of
spaces and newlines) and records HF's own decoding of every prefix of the
ids, so a test can split the ids anywhere into (prompt, continuation) and
check that strata's streamed text equals

    decode(prompt + continuation)[len(decode(prompt)):]

whenever decode(prompt) is a prefix of the whole (HF decoding of a cut
UTF-8 sequence gives U+FFFD, which the stream holds back instead).

Output, one file per tokenizer, OUT_DIR/<name>.json:
  {"tokenizer": "<tokenizer.json, relative to the repository root>",
   "hf_tokenizers_version": "...",
   "cases": [{"text": ..., "ids": [...],
              "prefix_text": [decode(ids[:0]), ..., decode(ids[:n])]}]}
decode is Tokenizer.decode(ids, skip_special_tokens=False).

Usage (from the repository root):
  python3 tools/make_continuation_testdata.py tests/data/continuation
"""
import json
import os
import sys

import tokenizers
from tokenizers import Tokenizer

TOKENIZERS = {
    "stories260K": "models/stories260K/tokenizer.json",
    "hf-gpt2": "tests/data/tokenizers/hf-gpt2/tokenizer.json",
    "hf-llama2-spm-bpe": "tests/data/tokenizers/hf-llama2-spm-bpe/tokenizer.json",
    "bytelevel-l3": "tests/data/tokenizers/generated/bytelevel-l3.tokenizer.json",
    "spm-bpe": "tests/data/tokenizers/generated/spm-bpe.tokenizer.json",
    "spm-meta": "tests/data/tokenizers/generated/spm-meta.tokenizer.json",
    "falconish": "tests/data/tokenizers/generated/falconish.tokenizer.json",
    "wsplit": "tests/data/tokenizers/generated/wsplit.tokenizer.json",
    "tiny-spm": "tests/data/tokenizers/tiny/spm.json",
    "tiny-meta": "tests/data/tokenizers/tiny/meta.json",
    "tiny-bytelevel": "tests/data/tokenizers/tiny/bytelevel.json",
}

TEXTS = [
    "Once upon a time, there was a little girl.",
    "Once upon a",
    " time",
    "  two leading spaces and  double  gaps",
    "line one\nline two\n\n  indented",
    "trailing space ",
    "tab\tand\ttabs",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059",
    "emoji \U0001F600 and \U0001F9D1\u200D\U0001F4BB end",
    "\U0001F600\U0001F600",
    "mixed: \u00e4\u00f6\u00fc \u0416\u0436 \u03a9 \u20ac5",
    "numbers 1234567 and 3.14159",
    "It's what they'll say, isn't it?",
    "a",
    " ",
    "\n",
    "Hello world",
    " Hello world",
    "x = f(y) + 2 * z;  // comment",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
]

MAX_IDS = 48


def special_ids(tok):
    """The ids of the added tokens, special ones first, at most three."""
    added = tok.get_added_tokens_decoder()
    ids = sorted(added, key=lambda i: (not added[i].special, i))
    return ids[:3]


def case(tok, text, ids):
    ids = ids[:MAX_IDS]
    return {
        "text": text,
        "ids": ids,
        "prefix_text": [tok.decode(ids[:k], skip_special_tokens=False)
                        for k in range(len(ids) + 1)],
    }


def cases_for(tok):
    out = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        if ids:
            out.append(case(tok, text, ids))
    # Added/special tokens in the middle and at the edges of a sequence.
    body = tok.encode("Once upon a time there", add_special_tokens=False).ids
    for sid in special_ids(tok):
        mid = len(body) // 2
        out.append(case(tok, "<special %d inside>" % sid,
                        body[:mid] + [sid] + body[mid:]))
        out.append(case(tok, "<special %d first>" % sid, [sid] + body))
        out.append(case(tok, "<special %d last>" % sid, body + [sid]))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name, path in TOKENIZERS.items():
        tok = Tokenizer.from_file(path)
        doc = {
            "tokenizer": path,
            "hf_tokenizers_version": tokenizers.__version__,
            "cases": cases_for(tok),
        }
        with open(os.path.join(out_dir, name + ".json"), "w",
                  encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=0)
            f.write("\n")
        print(name, len(doc["cases"]), "cases")


if __name__ == "__main__":
    main()
