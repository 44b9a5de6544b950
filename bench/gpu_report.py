#!/usr/bin/env python3
"""gpu_report.py LOG - the summary of bench/gpu: each strata figure beside
its peer's, with the ratio, and transfer rates against the link measured in
the same run (issue 8's targets alongside)."""
import json
import re
import sys


def main():
    text = open(sys.argv[1]).read()
    rows = [json.loads(l[5:]) for l in text.splitlines()
            if l.startswith("json {")]
    m = re.search(r"synchronous pinned copies ([0-9.]+) GB/s", text)
    link = float(m.group(1)) if m else 55.0
    print(f"link (pinned host->device, measured): {link:.1f} GB/s"
          + ("" if m else " (not measured: GPU-MACHINE.md's figure)"))

    def find(run, **kv):
        for r in rows:
            if r.get("run") == run and all(r.get(k) == v
                                           for k, v in kv.items()):
                return r
        return None

    host1 = find("strata-host", tokens=1)
    for n in (1, 128):
        s, a = find("strata-host", tokens=n), find("accelerate", tokens=n)
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
        if s.get("device_used_bytes"):
            r = s["device_used_bytes"] / s["plan_device_bytes"]
            print(f"    device memory used {s['device_used_bytes']} bytes, "
                  f"plan {s['plan_device_bytes']}: {r:.4f} of the plan")
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


if __name__ == "__main__":
    main()
