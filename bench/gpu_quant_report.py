#!/usr/bin/env python3
"""gpu_quant_report.py - the summary of bench/gpu-quant (issue 18), and the
calibrate reader it runs.

  gpu_quant_report.py LOG                   each stored type's resident
                                            decode and 512-token prompt
                                            beside llama.cpp's on the same
                                            file, the Q8_0 file at a 2 GiB
                                            budget beside llama.cpp's partial
                                            offload, and the CPU's decode
                                            rates as shares of its memory
                                            rate, each with issue 18's target
  gpu_quant_report.py calibrate-json FILE   a rates file (strata calibrate
                                            --out) as "json {...}" lines, one
                                            per stored type of the host
"""
import json
import sys

from gpu_report import finder, json_rows, verdict

# issue 18's targets
CPU_SHARE_TARGET = 0.70         # of the measured host memory read rate
CPU_SHARE_TYPES = ("BF16", "Q8_0", "Q4_K")
RESIDENT_TARGET_TYPES = ("Q8_0", "Q4_K_M")   # decode and prompt <= llama.cpp
HOST_WINDOW_TARGET_MS = 80.0    # Q8_0, 2 GiB, the host window
OFFLOAD_X_LLAMA = 1.5           # the automatic plan against -ngl offload


def calibrate_rows(doc):
    """The host's per-type rates from a rates file, each with the memory
    read rate it is a share of."""
    host = doc.get("host") or {}
    memory = host.get("host_memory_bytes_per_second", 0.0)
    rows = []
    for name, t in sorted((host.get("types") or {}).items()):
        rows.append({"run": "cpu-calibrate", "type": name,
                     "threads": host.get("threads"),
                     "memory_gbs": memory / 1e9,
                     "gemv_gbs": t.get("gemv_bytes_per_second", 0.0) / 1e9,
                     "layer_gbs": t.get("layer_bytes_per_second", 0.0) / 1e9})
    return rows


def speed(peer_ms, ms):
    """How many times faster strata is than its peer (peer time / ours)."""
    return peer_ms / ms if ms > 0 else 0.0


def resident_lines(find, types):
    for t in types:
        s = find("strata-resident", type=t)
        if not s:
            print(f"{t}: no resident figure")
            continue
        gbs = s["weight_bytes"] / s["decode_ms"] / 1e6
        print(f"{t} resident: decode {s['decode_ms']:.3f} ms/token "
              f"({gbs:.0f} GB/s of weights), {s['tokens']}-token prompt "
              f"{s['pass_ms']:.1f} ms")
        v = find("strata-resident-variant", type=t)
        if v:
            print(f"    variant: decode {v['decode_ms']:.3f} ms/token "
                  f"({speed(s['decode_ms'], v['decode_ms']):.2f}x the "
                  f"default), prompt {v['pass_ms']:.1f} ms")
        best = min((r for r in (s, v) if r), key=lambda r: r["decode_ms"])
        lg = find("llama-resident", has="decode_ms", type=t)
        lp = find("llama-resident", has="pass_ms", type=t)
        if not (lg or lp):
            continue
        parts = []
        if lg:
            x = speed(lg["decode_ms"], best["decode_ms"])
            parts.append(f"decode {lg['decode_ms']:.3f} ms/token "
                         f"(strata {x:.2f}x)")
        if lp:
            x = speed(lp["pass_ms"], s["pass_ms"])
            parts.append(f"prompt {lp['pass_ms']:.1f} ms (strata {x:.2f}x)")
        print("    llama.cpp -ngl 99: " + "; ".join(parts))
        if t in RESIDENT_TARGET_TYPES:
            ok = (not lg or best["decode_ms"] <= lg["decode_ms"]) and \
                 (not lp or s["pass_ms"] <= lp["pass_ms"])
            print(f"    decode and prompt <= llama.cpp's: {verdict(ok)}")


def budget_lines(find):
    h, a = find("strata-host", type="Q8_0"), find("strata-auto", type="Q8_0")
    if h:
        print(f"Q8_0, 2 GiB, host window: decode {h['decode_ms']:.1f} ms/token "
              f"(predicted {h.get('predicted_decode_ms', 0):.1f}); target <= "
              f"{HOST_WINDOW_TARGET_MS:g} ms: "
              f"{verdict(h['decode_ms'] <= HOST_WINDOW_TARGET_MS)}")
    if a:
        line = (f"Q8_0, 2 GiB, automatic plan ({a.get('plan')}): decode "
                f"{a['decode_ms']:.1f} ms/token (predicted "
                f"{a.get('predicted_decode_ms', 0):.1f}), prompt "
                f"{a['pass_ms']:.0f} ms")
        print(line)
        lg = find("llama-offload", has="decode_ms", type="Q8_0")
        if lg:
            x = speed(lg["decode_ms"], a["decode_ms"])
            print(f"    llama.cpp -ngl {lg.get('n_gpu_layers')}: decode "
                  f"{lg['decode_ms']:.1f} ms/token: strata {x:.2f}x "
                  f"(target >= {OFFLOAD_X_LLAMA:g}x: "
                  f"{verdict(x >= OFFLOAD_X_LLAMA)})")


def cpu_lines(rows, find):
    for c in (r for r in rows if r.get("run") == "cpu-calibrate"):
        mem = c["memory_gbs"] or float("inf")
        share = c["layer_gbs"] / mem
        line = (f"CPU {c['type']}: decode layer {c['layer_gbs']:.1f} GB/s, "
                f"{share:.2f} of memory ({c['memory_gbs']:.1f} GB/s, "
                f"{c['threads']} threads); GEMV {c['gemv_gbs']:.1f} GB/s, "
                f"{c['gemv_gbs'] / mem:.2f}")
        layer = find("cpu-layer", type=c["type"])
        if layer and layer.get("memory_gbs"):
            ls = layer["layer_gbs"] / layer["memory_gbs"]
            line += (f"; bench_cpu_layer {layer['layer_gbs']:.1f} GB/s, "
                     f"{ls:.2f} of its own memory figure")
        print(line)
        if c["type"] in CPU_SHARE_TYPES:
            print(f"    >= {CPU_SHARE_TARGET:.0%} of memory: "
                  f"{verdict(share >= CPU_SHARE_TARGET)}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "calibrate-json":
        for r in calibrate_rows(json.load(open(sys.argv[2]))):
            print("json " + json.dumps(r))
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = json_rows(open(sys.argv[1]).read())
    find = finder(rows)
    types = []
    for r in rows:
        if r.get("run") == "strata-resident" and r["type"] not in types:
            types.append(r["type"])
    resident_lines(find, types)
    budget_lines(find)
    cpu_lines(rows, find)


if __name__ == "__main__":
    main()
