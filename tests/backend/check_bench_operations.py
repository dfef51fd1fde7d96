#!/usr/bin/env python3
"""`vitpipe bench --json` reports each operation against its bound: FLOPs and bytes per step, the time, and the
time at the measured GEMM peak or memory bandwidth. Checks the figures are consistent with each other and with the
model: the weight gradients repeat the forward GEMMs' FLOPs (fc1's among them, fused with GELU in training),
attention's backward does 2.5 times its forward's products, and the operations' times fit in the step. The linear
GEMMs' rate that attention is compared with counts the plain GEMMs only."""
import json
import os
import subprocess
import sys

VITPIPE = os.environ["VITPIPE"]


def main():
    out = subprocess.run([VITPIPE, "bench", "--preset", "vit-micro", "--batch", "3", "--steps", "2", "--json"],
                         check=True, capture_output=True, text=True, timeout=300).stdout
    result = json.loads(out)
    ops = {row["operation"]: row for row in result["operations"]}
    failures = []

    def expect(condition, what):
        if not condition:
            failures.append(what)

    for name in ["linear forward", "linear backward (input)", "linear backward (weight)", "attention forward",
                 "attention backward", "LayerNorm forward", "LayerNorm backward", "linear+GELU forward",
                 "GELU backward", "optimizer step (AdamW)"]:
        expect(name in ops, f"no row for {name}: {sorted(ops)}")
    if failures:
        sys.exit("\n".join(failures))
    expect("GELU forward" not in ops, "GELU forward ran as its own pass: fc1 and GELU should be fused in training")
    expect(ops["linear+GELU forward"]["kind"] == "GEMM+GELU" and ops["linear forward"]["kind"] == "GEMM",
           f"kinds: {ops['linear+GELU forward']['kind']}, {ops['linear forward']['kind']}")
    expect(0 < result["breakdown"]["GEMM+GELU"] < result["breakdown"]["GEMM"],
           f"breakdown: {result['breakdown']}")
    fwd = ops["linear forward"]["gflop_per_step"] + ops["linear+GELU forward"]["gflop_per_step"]
    wgrad = ops["linear backward (weight)"]["gflop_per_step"]
    expect(abs(wgrad - fwd) <= 1e-9 * fwd, f"weight gradients {wgrad} GFLOP vs forward {fwd}")
    plain = [row for row in result["operations"] if row["operation"] in
             ("linear forward", "linear backward (input)", "linear backward (weight)")]
    rate = sum(r["gflop_per_step"] for r in plain) / sum(r["seconds_per_step"] for r in plain)
    expect(abs(result["linear_gemm_gflops_per_s"] - rate) <= 1e-6 * rate,
           f"linear GEMM rate {result['linear_gemm_gflops_per_s']} vs the plain GEMM rows' {rate}")
    expect(0 <= result["gelu_in_fused_gemms_share"] < 1, f"GELU share {result['gelu_in_fused_gemms_share']}")
    att_f, att_b = ops["attention forward"], ops["attention backward"]
    expect(abs(att_b["gflop_per_step"] - 2.5 * att_f["gflop_per_step"]) <= 1e-9 * att_b["gflop_per_step"],
           f"attention backward {att_b['gflop_per_step']} GFLOP vs 2.5 x forward {att_f['gflop_per_step']}")
    step = result["seconds_per_step"]
    total = sum(row["seconds_per_step"] for row in result["operations"])
    expect(0 < total <= step * 1.01, f"operations take {total} s of a {step} s step")
    bandwidth = result["memory_bandwidth_gb_per_s"] * 1e9
    peak = result["gemm_peak_gflops_per_s"] * 1e9
    for row in result["operations"]:
        name = row["operation"]
        expect(row["calls_per_step"] >= 1, f"{name}: {row['calls_per_step']} calls per step")
        expect(row["seconds_per_step"] > 0, f"{name}: no time")
        flop_bound = row["gflop_per_step"] * 1e9 / peak
        byte_bound = row["mb_per_step"] * 1e6 / bandwidth
        bound = max(flop_bound, byte_bound)
        expect(abs(row["bound_seconds_per_step"] - bound) <= 1e-9 + 1e-6 * bound,
               f"{name}: bound {row['bound_seconds_per_step']} s, expected {bound} s")
        expect(row["bound_by"] == ("GEMM peak" if flop_bound >= byte_bound else "memory bandwidth"),
               f"{name}: bound by {row['bound_by']}")
    for name in ["LayerNorm forward", "LayerNorm backward", "optimizer step (AdamW)"]:
        expect(ops[name]["gflop_per_step"] == 0 and ops[name]["mb_per_step"] > 0 and
               ops[name]["bound_by"] == "memory bandwidth", f"{name}: {ops[name]}")
    if failures:
        sys.exit("\n".join(failures))
    print(f"{len(ops)} operations consistent; step {step * 1e3:.2f} ms, operations {total * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
