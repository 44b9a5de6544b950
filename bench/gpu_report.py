#!/usr/bin/env python3
"""gpu_report.py - the summary of bench/gpu, and two helpers it runs.

  gpu_report.py LOG               each strata figure beside its peer's, with
                                  the ratio, transfer rates against the link
                                  measured in the same run (issue 8's
                                  targets), and the automatic plan's rows
                                  (issue 17): measured against predicted,
                                  peaks against the plan, accelerate and
                                  llama.cpp at the same budgets, and for
                                  bf16 the host memory floor of each
                                  placement
  gpu_report.py ngl PLAN BUDGET   llama-bench's -ngl for a device budget:
                                  the layers of PLAN (`strata plan --json`
                                  of the same file) that fit BUDGET bytes
                                  after STRATA_LLAMA_RESERVE bytes (default
                                  512 MiB: its KV cache, compute buffers and
                                  CUDA context), at most every layer
  gpu_report.py llama-json FILE   llama-bench -o json output as "json {...}"
                                  lines, one per test (pp512, tg64)
  gpu_report.py host-reads PLAN   the selected candidate's bytes read from
                                  host memory per decode step (cpu_bytes,
                                  streamed_bytes) as a "json {...}" line
"""
import json
import os
import re
import sys

MiB = 1 << 20
GiB = 1 << 30

# issue 17's targets: decode ms/token of bf16 at each budget, prompt speed
# against llama.cpp at 2 GiB, prediction and peaks
DECODE_TARGET_MS = {"2GiB": 45.0, "4GiB": 27.0}
PROMPT_X_LLAMA = 5.0
PREDICTION_TOLERANCE = 0.10
PEAK_TOLERANCE = 0.01


def size_bytes(text):
    """'2GiB', '512MiB', '4096' -> bytes (the binary units bench/gpu uses)."""
    m = re.fullmatch(r"([0-9]+)(KiB|MiB|GiB|TiB)?", text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    unit = {"KiB": 1 << 10, "MiB": MiB, "GiB": GiB, "TiB": 1 << 40}
    return int(m.group(1)) * unit.get(m.group(2), 1)


def ngl(plan, budget, reserve=512 * MiB):
    """Layers of a plan document whose bytes fit the budget after reserve."""
    layout = plan["layout"]
    units = layout["occupied_units"]
    if not units:
        return 0
    layer = layout["all_units_bytes"] / units
    n = int(max(0, budget - reserve) // layer)
    return min(n, units)


def llama_rows(doc):
    """llama-bench's JSON (a list of tests) as bench/gpu rows: a prompt test
    (n_prompt > 0, n_gen 0) gives pass_ms for its tokens, a generation test
    its decode_ms per token."""
    rows = []
    for t in doc:
        ms = t["avg_ns"] / 1e6
        row = {"n_gpu_layers": t.get("n_gpu_layers"),
               "model": os.path.basename(t.get("model_filename", ""))}
        if t.get("n_gen", 0) == 0:
            row.update(tokens=t["n_prompt"], pass_ms=ms)
        else:
            row.update(decode_ms=ms / t["n_gen"], steps=t["n_gen"])
        rows.append(row)
    return rows


def json_rows(text):
    """The "json {...}" lines of a bench log, as dicts."""
    return [json.loads(l[5:]) for l in text.splitlines()
            if l.startswith("json {")]


def finder(rows):
    """find(run, has=None, **fields): the first row of that run whose
    fields equal those given (and that has the key `has`), else None."""
    def find(run, has=None, **kv):
        for r in rows:
            if r.get("run") == run and all(r.get(k) == v
                                           for k, v in kv.items()) \
                    and (has is None or has in r):
                return r
        return None
    return find


def verdict(ok):
    return "met" if ok else "NOT met"


def peak_lines(s):
    """A bench_forward row's peaks against its plan (issue 17: at most the
    plan and within 1 %): the device by its free memory (everything strata
    took there), the host as bench_forward's peak_host_bytes (the
    residency's host tier and load staging, and the forward pass's CPU
    site: every host buffer the plan's host total counts)."""
    peaks = []
    if s.get("device_used_bytes") and s.get("plan_device_bytes"):
        peaks.append(("device", s["device_used_bytes"],
                      s["plan_device_bytes"]))
    if s.get("plan_host_bytes"):
        peaks.append(("host", s.get("peak_host_bytes", 0),
                      s["plan_host_bytes"]))
    for tier, used, planned in peaks:
        r = used / planned
        ok = r <= 1 and r >= 1 - PEAK_TOLERANCE
        print(f"    peak {tier} {used} bytes, plan {planned}: "
              f"{r:.4f} of the plan (<= plan and within "
              f"{PEAK_TOLERANCE:.0%}: {verdict(ok)})")


def host_reads(plan):
    """A `strata plan --json` document -> the selected candidate's bytes
    read from host memory per decode step: {cpu_bytes, streamed_bytes}
    (what the CPU computes from there, what the link carries)."""
    sel = plan.get("selected") or {}
    for c in plan.get("candidates", []):
        if c.get("name") == sel.get("name"):
            return {"cpu_bytes": c.get("cpu_bytes", 0),
                    "streamed_bytes": c.get("streamed_bytes", 0)}
    return None


def together_rate(text):
    """strata calibrate's host memory rate with the CPU and the link reading
    at once (GB/s), or None where the log has no such line."""
    m = re.search(r"\(([0-9.]+) together\)", text)
    return float(m.group(1)) if m else None


def floor_line(reads, rate, target):
    """The decode step's floor at this placement: every byte it reads from
    host memory (the CPU's and the link's) at the rate both reach together,
    against the target (ms)."""
    gb = (reads["cpu_bytes"] + reads["streamed_bytes"]) / 1e9
    floor = gb / rate * 1e3
    where = "below" if target < floor else "at or above"
    return (f"    host memory floor: {gb:.2f} GB read from host memory per "
            f"token (CPU {reads['cpu_bytes'] / 1e9:.2f}, link "
            f"{reads['streamed_bytes'] / 1e9:.2f}) at {rate:.1f} GB/s "
            f"(calibrate, both at once) = {floor:.1f} ms; the target "
            f"{target:g} ms is {where} it")


def placement_rows(rows, find, together=None):
    """issue 17: the automatic plan per file and budget; `together` the
    host memory's rate with the CPU and the link reading at once."""
    files = [r.get("file") for r in rows if r.get("run") == "strata-auto"]
    files = [f for i, f in enumerate(files) if f and f not in files[:i]]
    for f in files:
        for budget in ("2GiB", "4GiB"):
            s = find("strata-auto", file=f, budget=budget)
            if not s:
                print(f"{f}, {budget}: no strata figure")
                continue
            bf16 = f in ("safetensors", "gguf-bf16")
            line = (f"{f}, {budget}: strata {s['plan']}: decode "
                    f"{s['decode_ms']:.2f} ms/token")
            rd = s["decode_ms"] / s["predicted_decode_ms"] \
                if s.get("predicted_decode_ms") else None
            rp = s["pass_ms"] / s["predicted_prefill_ms"] \
                if s.get("predicted_prefill_ms") else None
            if rd is not None:
                line += (f" (predicted {s['predicted_decode_ms']:.2f}, "
                         f"measured/predicted {rd:.2f})")
            line += f"; prompt {s['tokens']} tokens {s['pass_ms']:.1f} ms"
            if rp is not None:
                line += (f" (predicted {s['predicted_prefill_ms']:.1f}, "
                         f"measured/predicted {rp:.2f})")
            print(line)
            both = [r for r in (rd, rp) if r is not None]
            print(f"    predictions within {PREDICTION_TOLERANCE:.0%}: "
                  + (verdict(all(abs(r - 1) <= PREDICTION_TOLERANCE
                                 for r in both)) if both else "no prediction"))
            if bf16:
                t = DECODE_TARGET_MS[budget]
                print(f"    bf16 decode target <= {t:g} ms: "
                      f"{verdict(s['decode_ms'] <= t)}")
                reads = find("host-reads", file=f, budget=budget)
                if reads and together:
                    print(floor_line(reads, together, t))
            peak_lines(s)
            # accelerate reads the safetensors; llama.cpp the GGUF files
            a = ad = None
            if f == "safetensors":
                a = find("accelerate", budget=budget, tokens=s["tokens"])
                ad = find("accelerate", budget=budget, has="decode_ms")
            if a or ad:
                parts = []
                if ad:
                    parts.append(f"decode {ad['decode_ms']:.1f} ms/token "
                                 f"(strata {ad['decode_ms'] / s['decode_ms']:.2f}x"
                                 " faster)")
                if a:
                    parts.append(f"prompt {a['pass_ms']:.1f} ms (strata "
                                 f"{a['pass_ms'] / s['pass_ms']:.2f}x faster)")
                print("    accelerate: " + "; ".join(parts))
            lp = find("llama-bench", file=f, budget=budget,
                      tokens=s["tokens"])
            lg = find("llama-bench", file=f, budget=budget, has="decode_ms")
            if lp or lg:
                parts = []
                if lg:
                    parts.append(f"decode {lg['decode_ms']:.1f} ms/token "
                                 f"(strata {lg['decode_ms'] / s['decode_ms']:.2f}x"
                                 " its speed)")
                if lp:
                    x = lp["pass_ms"] / s["pass_ms"]
                    parts.append(f"prompt {lp['pass_ms']:.1f} ms (strata "
                                 f"{x:.2f}x its speed)")
                ngls = (lp or lg).get("n_gpu_layers")
                print(f"    llama.cpp -ngl {ngls}: " + "; ".join(parts))
                if lp and bf16 and budget == "2GiB":
                    print(f"    prompt >= {PROMPT_X_LLAMA:g}x llama.cpp: "
                          f"{verdict(x >= PROMPT_X_LLAMA)}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "ngl":
        plan = json.load(open(sys.argv[2]))
        reserve = size_bytes(os.environ.get("STRATA_LLAMA_RESERVE", "512MiB"))
        print(ngl(plan, size_bytes(sys.argv[3]), reserve))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "host-reads":
        r = host_reads(json.load(open(sys.argv[2])))
        if r:
            print("json " + json.dumps(r))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "llama-json":
        for r in llama_rows(json.load(open(sys.argv[2]))):
            print("json " + json.dumps(r))
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    text = open(sys.argv[1]).read()
    rows = json_rows(text)
    m = re.search(r"synchronous pinned copies ([0-9.]+) GB/s", text)
    link = float(m.group(1)) if m else 55.0
    print(f"link (pinned host->device, measured): {link:.1f} GB/s"
          + ("" if m else " (not measured: GPU-MACHINE.md's figure)"))

    find = finder(rows)
    host1 = find("strata-host", tokens=1)
    for n in (1, 128):
        s = find("strata-host", tokens=n)
        a = find("accelerate", tokens=n, budget="2GiB")
        if not s:
            print(f"strata host window, {n} tokens: no figure")
            continue
        gbs = s["weight_bytes"] / s["pass_ms"] / 1e6
        h2d = s["h2d_bytes_per_pass"] / s["pass_ms"] / 1e6
        line = (f"{n:>3}-token pass, 2 GiB: strata {s['pass_ms']:.1f} ms "
                f"({gbs:.1f} GB/s of weights; host->device {h2d:.1f} GB/s, "
                f"{h2d / link:.0%} of the link)")
        if a:
            line += (f"; accelerate {a['pass_ms']:.1f} ms: strata "
                     f"{a['pass_ms'] / s['pass_ms']:.2f}x faster")
        print(line)
        if n == 1:
            print(f"    target <= 152 ms: "
                  f"{'met' if s['pass_ms'] <= 152 else 'NOT met'}")
        elif host1:
            r = s["pass_ms"] / host1["pass_ms"]
            print(f"    128 vs 1 token: {r:.2f}x (target <= 1.1x: "
                  f"{'met' if r <= 1.1 else 'NOT met'})")
        peak_lines(s)
        if a and a.get("device_peak_bytes"):
            print(f"    accelerate's torch peak: {a['device_peak_bytes']} bytes")
    s, t = find("strata-resident", tokens=1), find("transformers")
    for r in rows:
        if r.get("run") == "transformers" and "decode_ms" in r:
            t = r
    if s:
        hbm = s["weight_bytes"] / s["decode_ms"] / 1e6
        line = (f"resident decode: strata {s['decode_ms']:.3f} ms/token "
                f"({hbm:.0f} GB/s of weights)")
        if t:
            line += (f"; transformers {t['decode_ms']:.3f} ms/token: strata "
                     f"{t['decode_ms'] / s['decode_ms']:.2f}x faster")
        print(line + f"; target <= 2.3 ms: "
              f"{'met' if s['decode_ms'] <= 2.3 else 'NOT met'}")
        peak_lines(s)
    for n in (1, 128):
        s, t = find("strata-resident", tokens=n), find("transformers",
                                                      tokens=n)
        if s and t:
            print(f"resident {n}-token pass: strata {s['pass_ms']:.2f} ms, "
                  f"transformers {t['pass_ms']:.2f} ms")
    d, s = find("disk"), find("strata-disk", tokens=1)
    if d and s:
        rate = d["bytes"] / d["seconds"] / 1e9
        # what came off the disk in the pass: the streamed layers (the
        # static tensors stay resident and were read once at load)
        gbs = s["h2d_bytes_per_pass"] / s["pass_ms"] / 1e6
        print(f"disk mode, cold: strata {s['pass_ms']:.0f} ms per pass, "
              f"{gbs:.2f} GB/s from disk; the disk's O_DIRECT rate "
              f"{rate:.2f} GB/s: {gbs / rate:.0%} (target >= 90%)")
    placement_rows(rows, find, together_rate(text))


if __name__ == "__main__":
    main()
