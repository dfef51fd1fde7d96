"""vitpipe's bicubic resize against torch.nn.functional.interpolate(mode="bicubic", align_corners=False), on random
N(0, 1) grids up and down, square and not.

torch's float64 kernel is the exact algorithm (A = -0.75, half-pixel centres, clamped edges): vitpipe must agree
with it to 1e-6. torch 1.13's float32 CPU kernel (what transformers runs on fp32 position embeddings) carries
an error of about one float ulp (at 1..4) in each of its 16 weights, so against it the bound scales with the input's
magnitude: 4e-6 x max |input| (measured: up to ~6e-6 on N(0, 1) grids, i.e. ~1.7e-6 x max |input|)."""

import os

import torch

from hf_reference import Checks, probe, read_safetensors, temp_dir, write_safetensors

checks = Checks()
directory = temp_dir()
g = torch.Generator().manual_seed(1)

# (channels, in_h, in_w, out_h, out_w)
cases = [(4, 4, 4, 6, 6), (16, 14, 14, 24, 24), (16, 24, 24, 14, 14), (3, 7, 5, 9, 4), (5, 1, 1, 3, 3),
         (2, 3, 3, 1, 1), (6, 16, 16, 16, 16), (8, 14, 14, 37, 19), (8, 32, 32, 7, 9), (3, 2, 9, 11, 3)]
tensors = {}
for k, (c, h, w, oh, ow) in enumerate(cases):
    tensors[f"grid_{k}"] = torch.randn(c, h, w, generator=g)
    tensors[f"size_{k}"] = torch.tensor([oh, ow], dtype=torch.int64)
src = os.path.join(directory, "grids.safetensors")
dst = os.path.join(directory, "resized.safetensors")
write_safetensors(src, tensors, {"format": "pt"})
probe("interpolate", src, dst)
resized = read_safetensors(dst)[0]

worst64 = worst32 = 0.0
for k, (c, h, w, oh, ow) in enumerate(cases):
    grid = tensors[f"grid_{k}"][None]
    exact = torch.nn.functional.interpolate(grid.double(), size=(oh, ow), mode="bicubic", align_corners=False)[0]
    torch32 = torch.nn.functional.interpolate(grid, size=(oh, ow), mode="bicubic", align_corners=False)[0]
    got = resized[f"out_{k}"]
    if got.shape != exact.shape:
        checks.check(False, f"{h}x{w} -> {oh}x{ow}: shape {tuple(got.shape)}")
        continue
    diff64 = (got.double() - exact).abs().max().item()
    diff32 = ((got - torch32).abs().max() / grid.abs().max()).item()
    worst64, worst32 = max(worst64, diff64), max(worst32, diff32)
    checks.check(diff64 <= 1e-6, f"{h}x{w} -> {oh}x{ow}: max |vitpipe - torch float64| {diff64}")
    checks.check(diff32 <= 4e-6, f"{h}x{w} -> {oh}x{ow}: max |vitpipe - torch float32| / max |input| {diff32}")
print(f"over {len(cases)} grids: max |vitpipe - torch float64| {worst64:.3g}, "
      f"max |vitpipe - torch float32| / max |input| {worst32:.3g}")
checks.done()
