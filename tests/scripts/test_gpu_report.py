#!/usr/bin/env python3
"""test_gpu_report.py - bench/gpu_report.py on a recorded input, where no GPU
is: the issue 17 rows (measured against predicted with the ratio and the 10 %
verdict, peaks against the plan, accelerate and llama.cpp beside), the rows
of issue 8 still there, llama-bench's -ngl for a budget, and llama-bench's
JSON turned into rows (layer: tooling, run by CTest as test_gpu_report)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
REPORT = os.path.join(BENCH, "gpu_report.py")
SAMPLE = os.path.join(HERE, "data", "gpu-bench-sample.log")
sys.path.insert(0, BENCH)
import gpu_report  # noqa: E402

# the 7.5 GB llama of GPU-MACHINE.md: 16 layers of bf16, each q, o
# 4096 x 4096, k, v 1024 x 4096, gate, up, down 14336 x 4096, two norms
LAYER = (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096
         + 2 * 4096) * 2
PEER_PLAN = {"layout": {"occupied_units": 16, "all_units_bytes": 16 * LAYER}}


def report(path):
    return subprocess.run([sys.executable, REPORT, path], check=True,
                          capture_output=True, text=True).stdout


class Placement(unittest.TestCase):
    def setUp(self):
        self.out = report(SAMPLE)

    def line(self, start):
        for l in self.out.splitlines():
            if l.startswith(start):
                return l
        self.fail(f"no line starting {start!r} in:\n{self.out}")

    def test_measured_beside_predicted_with_the_ratio(self):
        l = self.line("safetensors, 2GiB: strata placement:r3,c9,w4: ")
        self.assertIn("decode 44.00 ms/token (predicted 42.00, "
                      "measured/predicted 1.05)", l)
        self.assertIn("prompt 512 tokens 140.0 ms (predicted 130.0, "
                      "measured/predicted 1.08)", l)
        # 4 GiB: 30 / 25 = 1.20, past 10 %
        l = self.line("safetensors, 4GiB: ")
        self.assertIn("measured/predicted 1.20", l)

    def test_host_memory_floor_of_bf16_rows(self):
        # (4.23 + 2.115) GB at 141 GB/s = 45.0 ms: the 45 ms target is at
        # it; (2.82 + 1.41) GB = 30.0 ms: the 27 ms target below it
        blocks = self.out.split("safetensors, 4GiB")
        self.assertIn("host memory floor: 6.34 GB read from host memory per "
                      "token (CPU 4.23, link 2.12) at 141.0 GB/s (calibrate, "
                      "both at once) = 45.0 ms; the target 45 ms is at or "
                      "above it", blocks[0])
        self.assertIn("= 30.0 ms; the target 27 ms is below it", blocks[1])
        # no host-reads row, no floor line
        self.assertNotIn("floor", self.out.split("gguf-bf16, 2GiB")[1])

    def test_host_reads_of_a_plan(self):
        plan = {"selected": {"name": "placement:r2,c9,w5"},
                "candidates": [{"name": "resident", "cpu_bytes": 0},
                               {"name": "placement:r2,c9,w5",
                                "cpu_bytes": 7, "streamed_bytes": 5}]}
        self.assertEqual(gpu_report.host_reads(plan),
                         {"cpu_bytes": 7, "streamed_bytes": 5})
        self.assertIsNone(gpu_report.host_reads({"selected": None}))

    def test_verdicts(self):
        blocks = self.out.split("safetensors, 4GiB")
        self.assertIn("predictions within 10%: met", blocks[0])
        self.assertIn("bf16 decode target <= 45 ms: met", blocks[0])
        self.assertIn("predictions within 10%: NOT met", blocks[1])
        self.assertIn("bf16 decode target <= 27 ms: NOT met", blocks[1])

    def test_peaks_against_the_plan(self):
        self.assertIn("peak device 2130000000 bytes, plan 2140000000: 0.9953 "
                      "of the plan (<= plan and within 1%: met)", self.out)
        # above the plan is never met
        self.assertIn("peak device 4400000000 bytes, plan 4290000000: 1.0256 "
                      "of the plan (<= plan and within 1%: NOT met)", self.out)
        self.assertIn("peak host 5500000000 bytes, plan 5500000000: 1.0000",
                      self.out)

    def test_uniform_rows_say_their_peaks_too(self):
        # the host window's 1-token row: the same verdict as a placement's
        block = self.out.split("128-token pass")[0]
        self.assertIn("peak device 2100000000 bytes, plan 2140000000: "
                      "0.9813 of the plan (<= plan and within 1%: NOT met)",
                      block)

    def test_peers_at_the_same_budget(self):
        self.assertIn("accelerate: decode 950.0 ms/token (strata 21.59x "
                      "faster); prompt 1200.0 ms (strata 8.57x faster)",
                      self.out)
        self.assertIn("accelerate: decode 700.0 ms/token (strata 23.33x "
                      "faster); prompt 1100.0 ms (strata 9.17x faster)",
                      self.out)
        l = self.line("    llama.cpp -ngl 6: ")
        self.assertIn("decode 46.7 ms/token (strata 1.56x its speed)", l)
        self.assertIn("prompt 457.0 ms (strata 4.57x its speed)", l)
        # a file without a row at a budget says so
        self.assertIn("gguf-q8_0, 4GiB: no strata figure", self.out)
        # Q8_0 is not held to the bf16 targets, and accelerate reads the
        # safetensors only
        q8 = self.out.split("gguf-q8_0, 2GiB")[1].split("gguf-q8_0, 4GiB")[0]
        self.assertNotIn("bf16 decode target", q8)
        self.assertNotIn("prompt >= 5x", q8)
        self.assertNotIn("accelerate", q8)
        # the bf16 GGUF: against llama.cpp's -ngl 3, 951 / 130 = 7.32x
        bf = self.out.split("gguf-bf16, 2GiB")[1].split("gguf-bf16, 4GiB")[0]
        self.assertIn("llama.cpp -ngl 3: decode 68.0 ms/token (strata 1.49x "
                      "its speed); prompt 951.0 ms (strata 7.32x its speed)",
                      bf)
        self.assertIn("prompt >= 5x llama.cpp: met", bf)
        self.assertIn("bf16 decode target <= 45 ms: NOT met", bf)

    def test_the_rows_of_issue_8_are_kept(self):
        self.assertIn("link (pinned host->device, measured): 54.0 GB/s",
                      self.out)
        self.assertIn("  1-token pass, 2 GiB: strata 130.0 ms", self.out)
        self.assertIn("accelerate 965.0 ms: strata 7.42x faster", self.out)


class Helpers(unittest.TestCase):
    def test_ngl_matches_the_layers_llama_cpp_was_run_with(self):
        # GPU-MACHINE.md: -ngl 3 at ~2 GiB, -ngl 8 at ~4 GiB
        self.assertEqual(gpu_report.ngl(PEER_PLAN, 2 << 30), 3)
        self.assertEqual(gpu_report.ngl(PEER_PLAN, 4 << 30), 8)
        self.assertEqual(gpu_report.ngl(PEER_PLAN, 256 << 20), 0)
        self.assertEqual(gpu_report.ngl(PEER_PLAN, 1 << 40), 16)
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(PEER_PLAN, f)
            f.flush()
            env = dict(os.environ, STRATA_LLAMA_RESERVE="0")
            out = subprocess.run([sys.executable, REPORT, "ngl", f.name,
                                  "2GiB"], check=True, capture_output=True,
                                 text=True, env=env).stdout
        self.assertEqual(out.strip(), "4")

    def test_sizes(self):
        self.assertEqual(gpu_report.size_bytes("2GiB"), 2 << 30)
        self.assertEqual(gpu_report.size_bytes("512MiB"), 512 << 20)
        self.assertEqual(gpu_report.size_bytes("77"), 77)
        with self.assertRaises(ValueError):
            gpu_report.size_bytes("2GB")

    def test_llama_bench_json_becomes_rows(self):
        doc = [{"model_filename": "/m/llama-bf16.gguf", "n_prompt": 512,
                "n_gen": 0, "n_gpu_layers": 3, "avg_ns": 951000000},
               {"model_filename": "/m/llama-bf16.gguf", "n_prompt": 0,
                "n_gen": 32, "n_gpu_layers": 3, "avg_ns": 2176000000}]
        rows = gpu_report.llama_rows(doc)
        self.assertEqual(rows[0], {"n_gpu_layers": 3,
                                   "model": "llama-bf16.gguf",
                                   "tokens": 512, "pass_ms": 951.0})
        self.assertEqual(rows[1]["decode_ms"], 68.0)
        self.assertEqual(rows[1]["steps"], 32)
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(doc, f)
            f.flush()
            out = subprocess.run([sys.executable, REPORT, "llama-json",
                                  f.name], check=True, capture_output=True,
                                 text=True).stdout
        lines = out.splitlines()
        self.assertEqual(len(lines), 2)
        self.assertTrue(all(l.startswith("json {") for l in lines))


if __name__ == "__main__":
    unittest.main()
