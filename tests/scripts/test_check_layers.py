#!/usr/bin/env python3
"""test_check_layers.py - scripts/check-layers on fixture trees built here:
a clean tree passes, and each kind of layering fault fails with its own
message (layer: tooling, run by CTest as test_check_layers)."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "check-layers")

HEADERS = {
    "base": "base", "shard": "shard", "checkpoint": "checkpoint",
    "backend": "backend", "model": "model", "text": "text", "plan": "plan",
    "residency": "residency", "infer": "infer", "serve": "serve",
}


def clean_tree(root):
    """One public header per layer, one source per layer including only
    earlier layers, the way the repository is laid out."""
    files = {}
    for name, layer in HEADERS.items():
        files[f"include/strata/{name}.h"] = (
            f"/* {name}.h - fixture header (layer: {layer}). */\n"
            f'#include "strata/base.h"\n')
    files["include/strata/base.h"] = "/* base.h - fixture (layer: base). */\n"
    files["include/strata/infer.h"] += '#include "strata/residency.h"\n'
    files["include/strata/serve.h"] += '#include "strata/infer.h"\n'
    files["src/base/x.c"] = '#include "strata/base.h"\n#include <stdio.h>\n'
    files["src/checkpoint/internal.h"] = '#include "strata/checkpoint.h"\n'
    files["src/checkpoint/x.c"] = '#include "checkpoint/internal.h"\n'
    files["src/backend/cuda/cuda_internal.h"] = "int strata_cuda_go(void);\n"
    files["src/backend/cuda/go.c"] = (
        '#include "backend/cuda/cuda_internal.h"\n'
        "int strata_cuda_go(void) { return 0; }\n")
    files["src/backend/cpu/k.c"] = '#include "strata/backend.h"\n'
    files["src/text/x.c"] = '#include "strata/checkpoint.h"\n'
    files["src/infer/internal.h"] = '#include "strata/infer.h"\n'
    files["src/infer/forward.c"] = (
        '#include "infer/internal.h"\n#include "blake3.h"\n'
        "/* strata_cuda_go() is named in a comment only */\n"
        'static const char *s = "strata_cuda_go";\n'
        "int f(void) { return strata_cpu_kernel_ops != 0; }\n")
    files["src/serve/batch.c"] = '#include "strata/serve.h"\n'
    files["src/cli/main.c"] = '#include "strata/serve.h"\n#include "strata/text.h"\n'
    files["tests/infer/helper.h"] = '#include "strata/infer.h"\n'
    files["tests/infer/test_x.c"] = (
        '#include "infer/helper.h"\n#include "infer/internal.h"\n')
    files["tests/backend/test_cuda.c"] = "int g(void) { return strata_cuda_go(); }\n"
    files["tests/cli/test_y.c"] = '#include "infer/helper.h"\n'
    files["tests/support/writer.h"] = (
        "/* writer.h - fixture support (layer: checkpoint). */\n"
        '#include "strata/checkpoint.h"\n')
    files["tests/plan/test_z.c"] = '#include "support/writer.h"\n'
    files["tests/fuzz/fuzz_a.c"] = '#include "cli/anything.h"\n'
    for rel, text in files.items():
        write(root, rel, text)


def write(root, rel, text, append=False):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a" if append else "w") as f:
        f.write(text)


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True,
                       text=True)
    return p.returncode, p.stdout + p.stderr


class CheckLayers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        clean_tree(self.root)

    def tearDown(self):
        self.tmp.cleanup()

    def fails(self, rel, text, *words, code=1):
        write(self.root, rel, text, append=True)
        rc, out = run(self.root)
        self.assertEqual(rc, code, out)
        for w in words:
            self.assertIn(w, out)
        return out

    def test_clean_tree_passes(self):
        rc, out = run(self.root)
        self.assertEqual(rc, 0, out)
        self.assertIn("follow the layer table", out)

    def test_include_back_up_the_table_fails(self):
        self.fails("src/checkpoint/x.c", '#include "strata/plan.h"\n',
                   "src/checkpoint/x.c:2", "checkpoint includes",
                   "of plan, a later layer", "fix:")

    def test_public_header_back_up_the_table_fails(self):
        self.fails("include/strata/model.h", '#include "strata/infer.h"\n',
                   "include/strata/model.h:3", "of infer, a later layer")

    def test_infer_including_serve_fails(self):
        self.fails("src/infer/forward.c", '#include "strata/serve.h"\n',
                   "infer includes \"strata/serve.h\" of serve")

    def test_same_rank_include_fails(self):
        self.fails("src/shard/x.c", '#include "strata/backend.h"\n',
                   "shard includes", "same rank")
        write(self.root, "src/shard/x.c", "")
        self.fails("src/text/x.c", '#include "strata/model.h"\n', "same rank")

    def test_other_layers_internal_header_fails(self):
        self.fails("src/cli/main.c", '#include "infer/internal.h"\n',
                   "an internal header of infer")

    def test_test_including_internal_header_of_earlier_layer_fails(self):
        self.fails("tests/infer/test_x.c",
                   '#include "backend/cuda/cuda_internal.h"\n',
                   "tests/infer/test_x.c:3", "internal header of backend")

    def test_test_including_a_later_layers_test_helper_fails(self):
        self.fails("tests/plan/test_z.c", '#include "infer/helper.h"\n',
                   "plan includes \"infer/helper.h\" of infer")

    def test_backend_private_call_fails(self):
        out = self.fails("src/serve/batch.c",
                         "int h(void) { return strata_cuda_go(); }\n",
                         "src/serve/batch.c:2", "serve uses strata_cuda_go")
        self.assertEqual(out.count("strata_cuda_go,"), 1)

    def test_backend_private_name_in_test_of_other_layer_fails(self):
        self.fails("tests/cli/test_y.c", "int q = strata_cpu_pool_size;\n",
                   "cli uses strata_cpu_pool_size")

    def test_no_use_is_excused_any_more(self):
        # the allow-list emptied when issue 16 point 1 landed: the file and
        # name it excused fail like any other
        self.fails("src/infer/forward.c",
                   "int a(void) { return strata_cuda_half(); }\n",
                   "infer uses strata_cuda_half")
        self.fails("src/infer/other.c",
                   "int b(void) { return strata_cuda_half(); }\n",
                   "infer uses strata_cuda_half")

    def test_header_without_layer_fails_as_usage(self):
        self.fails("include/strata/new.h", "/* new.h - no tag */\n",
                   "include/strata/new.h: names no layer", code=2)

    def test_unknown_src_folder_fails_as_usage(self):
        self.fails("src/extra/x.c", "\n", "src/extra/ is not in the layer table",
                   code=2)

    def test_unknown_layer_tag_fails_as_usage(self):
        self.fails("tests/support/bad.h", "/* bad.h (layer: nowhere) */\n",
                   "layer 'nowhere' is not in the layer table", code=2)


if __name__ == "__main__":
    unittest.main(verbosity=1)
