"""The bf16 tensor-core flash-attention backward's host model against PyTorch's scaled-dot-product attention backward.

Draws Q, K, V and dO in bf16 at ViT-B/16's shape (197 tokens, 12 heads of 64) and at a small odd one, runs
PyTorch's SDPA (Debian's torch: F._scaled_dot_product_attention, the math path, in bf16) forward and backward,
writes the case for tests/cuda/probes/flash_bf16_probe.cpp (which runs the model of the kernels in
kernels/flash_attention_backward_bf16.cu) and holds its dQ, dK, dV to PyTorch's at bf16's tolerance, 3e-2 of the
largest magnitude. The log-sum-exp the kernels read is computed here in float32 from the same bf16 inputs. Exits 77
when torch (or its SDPA) is missing.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

TOLERANCE = 3e-2

# The reference runs at this CPU's own level: PyTorch 1.13 hands bf16 batched products to oneDNN where the CPU has
# AVX-512 bf16, and a oneDNN capped below that (ONEDNN_MAX_CPU_ISA, set to test vitpipe's lower levels) refuses them
# ("could not create a primitive descriptor iterator"). The probe runs no oneDNN.
for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
    os.environ.pop(name, None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("SKIP: no torch")
        return 77
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is None and hasattr(F, "_scaled_dot_product_attention"):
        def sdpa(q, k, v):  # torch 1.13: (output, weights)
            return F._scaled_dot_product_attention(q, k, v, None, 0.0, False, False)[0]
    if sdpa is None:
        print("SKIP: this torch has no scaled-dot-product attention")
        return 77

    failed = False
    for tokens, heads, head_dim, seed in ((197, 12, 64, 1), (37, 3, 32, 2)):
        generator = torch.Generator().manual_seed(seed)
        q, k, v, d_o = (torch.randn(1, heads, tokens, head_dim, generator=generator).to(torch.bfloat16)
                        for _ in range(4))
        q.requires_grad_()
        k.requires_grad_()
        v.requires_grad_()
        o = sdpa(q, k, v)
        o.backward(d_o)
        scale = head_dim ** -0.5
        lse = torch.logsumexp((q.detach().float() @ k.detach().float().transpose(-1, -2)) * scale, dim=-1)
        arrays = [q, k, v, o, d_o, lse, q.grad, k.grad, v.grad]
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "case.bin")
            with open(path, "wb") as f:
                f.write(struct.pack("<3q", tokens, heads, head_dim))
                for a in arrays:
                    f.write(a.detach().float().contiguous().numpy().astype("<f4").tobytes())
            run = subprocess.run([args.probe, path], capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            print(f"probe failed ({run.returncode}): {run.stderr.strip()}")
            return 1
        fields = run.stdout.split()
        errors = dict(zip(fields[0::2], map(float, fields[1::2])))
        verdict = all(e < TOLERANCE for e in errors.values()) and len(errors) == 3
        failed |= not verdict
        print(f"T={tokens} heads={heads} d={head_dim}: relative to torch {errors} "
              f"({'ok' if verdict else 'FAIL'}, tolerance {TOLERANCE})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
