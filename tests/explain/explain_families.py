"""`vitpipe explain` on the other model families, against a float64 PyTorch reference: DeiT with its teacher head
(class and distillation tokens averaged), DINOv2 with SwiGLU (class token and patch mean), DINOv2 with registers.
Checkpoints and processors are predict_families.py's (written as save_pretrained writes them); the model is
tests/model/reference_families.py's transcription of transformers, run in float64 with the attention probabilities,
the last block's first LayerNorm output and their gradients of the finding's logit kept. The reference methods,
transcribed from their papers as the README states them:
  rollout       r^T M_L ... M_1, M = (F + I) / 2 with rows normalised (Abnar & Zuidema 2020), F the heads fused
                (--head-fusion mean, the default, or max | min elementwise) with the floor(D * T) smallest entries of
                each row set to 0, the class token's column kept (--discard-ratio D, default 0.9; vit-explain's
                options and defaults); checked at the defaults and at mean / 0 (plain rollout), max / 0.5, min / 0
  grad-rollout  r^T (I + B_L) ... (I + B_1), B = mean over heads of max(0, dlogit/dA * A) (Chefer et al. 2021)
  gradcam       max(0, X w) on the patch tokens, X = last block's LayerNorm-before output, w = dlogit/dX averaged
                over the patch tokens (pytorch-grad-cam's ViT recipe)
where r weighs the tokens as the head reads them (class token; class and distillation half each; class token half,
patch mean half). The .npy maps must agree to 1e-4 relative to their largest value. Also: for a centre-cropping
processor, the overlay colours only where the crop came from (a strip of a wide gray image outside it stays gray).

usage: explain_families.py --case NAME
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "predict"))
import hf_families  # noqa: E402
import hf_vit  # noqa: E402
import predict_families as pf  # noqa: E402
import predict_golden as pg  # noqa: E402
import reference_families  # noqa: E402  (on the path through hf_families)

TOLERANCE = 1e-4
CASES = ["deit-distilled-crop", "dinov2-swiglu-rad-dino-processor", "dinov2-registers-bit"]
METHODS = ["rollout", "grad-rollout", "gradcam"]


def capture_forward(params, cfg, pixels):
    """reference_families.forward with the attention probabilities and LayerNorm outputs kept (their .grad filled
    by a backward pass): torch.softmax and F.layer_norm are wrapped for the call."""
    probs, norms = [], []
    softmax, layer_norm = torch.softmax, F.layer_norm

    def keep_softmax(*args, **kwargs):
        out = softmax(*args, **kwargs)
        out.retain_grad()
        probs.append(out)
        return out

    def keep_layer_norm(*args, **kwargs):
        out = layer_norm(*args, **kwargs)
        out.retain_grad()
        norms.append(out)
        return out

    torch.softmax, F.layer_norm = keep_softmax, keep_layer_norm
    try:
        logits = reference_families.forward(params, pixels, None, cfg)[0]
    finally:
        torch.softmax, F.layer_norm = softmax, layer_norm
    assert len(probs) == cfg["layers"] and len(norms) == 2 * cfg["layers"] + 1
    return logits, probs, norms[2 * (cfg["layers"] - 1)]  # norm1, norm2 per block, then the final LayerNorm


def readout(cfg, tokens, patches):
    r = torch.zeros(tokens, dtype=torch.float64)
    if cfg["model_type"].startswith("dinov2"):
        r[0] = 0.5
        r[tokens - patches:] = 0.5 / patches
    elif cfg["teacher"]:
        r[0] = r[1] = 0.5
    else:
        r[0] = 1.0
    return r


DEFAULT_ROLLOUT = ("mean", 0.9)  # vitpipe's default --head-fusion and --discard-ratio (vit-explain's)
ROLLOUT_VARIANTS = [("mean", 0.0), ("max", 0.5), ("min", 0.0)]  # Abnar & Zuidema's plain rollout, and others


def fused_rollout(probs, r, eye, fusion, discard):
    v = r.clone()
    for a in reversed(probs):
        heads = a[0].detach()
        f = {"mean": heads.mean(0), "max": heads.amax(0), "min": heads.amin(0)}[fusion].clone()
        count = math.floor(discard * f.shape[-1])
        if count:
            order = torch.sort(f, dim=-1, stable=True).indices[:, :count]
            dropped = torch.zeros_like(f, dtype=torch.bool).scatter_(1, order, True)
            dropped[:, 0] = False
            f[dropped] = 0
        m = (f + eye) / 2
        v = v @ (m / m.sum(-1, keepdim=True))
    return v


def reference_maps(params, cfg, pixels, label):
    logits, probs, ln1 = capture_forward(params, cfg, pixels)
    logits[0, label].backward()
    tokens = probs[0].shape[-1]
    grid = pixels.shape[-1] // cfg["patch"]
    patches = grid * grid
    r = readout(cfg, tokens, patches)
    eye = torch.eye(tokens, dtype=torch.float64)
    maps = {"rollout": fused_rollout(probs, r, eye, *DEFAULT_ROLLOUT)[-patches:]}
    v = r.clone()
    for a in reversed(probs):
        v = v @ (eye + (a.grad[0] * a[0]).clamp(min=0).mean(0).detach())
    maps["grad-rollout"] = v[-patches:]
    x, g = ln1[0, -patches:].detach(), ln1.grad[0, -patches:]
    maps["gradcam"] = (x @ g.mean(0)).clamp(min=0)
    for fusion, discard in ROLLOUT_VARIANTS:
        maps[f"rollout {fusion} {discard:g}"] = fused_rollout(probs, r, eye, fusion, discard)[-patches:]
    return {k: m.reshape(grid, grid).numpy() for k, m in maps.items()}, torch.sigmoid(logits[0, label]).item()


def run(*args):
    return subprocess.run([os.environ["VITPIPE"], *map(str, args)], capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=CASES)
    name = ap.parse_args().case
    torch.set_num_threads(2)
    checks = pg.Checks()
    root = tempfile.mkdtemp(prefix="vitpipe_explain_families_")
    try:
        config, seed, preprocessor = pf.CASES[name]
        directory = pg.write_model(os.path.join(root, name), config, pf.family_state_dict(config, seed),
                                   preprocessor)
        # A wide gray image: the processors resize its short side and crop the centre, leaving both ends unseen.
        rng = np.random.default_rng(5)
        image_path = os.path.join(root, "wide.png")
        Image.fromarray(rng.integers(30, 220, size=(40, 96)).astype(np.uint8), mode="L").save(image_path)
        processor = hf_families.Processor.from_file(os.path.join(directory, "preprocessor_config.json"))
        pixels = torch.from_numpy(processor.preprocess(hf_vit.load_image(image_path))[None]).double()
        params, cfg, j = hf_families.load_pretrained(directory, torch.float64)
        cfg["teacher"] = j["architectures"][0] == "DeiTForImageClassificationWithTeacher"
        label = 1
        finding = config["id2label"][str(label)]
        out = os.path.join(root, "maps")
        result = run("explain", "--model", directory, "--finding", finding, "--out", out,
                     *sum((["--method", m] for m in METHODS), []), image_path)
        checks.check(result.returncode == 0, f"{name}: explain exit {result.returncode}: {result.stderr.strip()}")
        if result.returncode != 0:
            return checks
        reference, probability = reference_maps({k: v.requires_grad_(True) for k, v in params.items()}, cfg, pixels,
                                                label)
        runs = [(out, None)]
        for fusion, discard in ROLLOUT_VARIANTS:
            variant_out = os.path.join(root, f"maps-{fusion}-{discard:g}")
            result = run("explain", "--model", directory, "--finding", finding, "--out", variant_out, "--method",
                         "rollout", "--head-fusion", fusion, "--discard-ratio", discard, image_path)
            checks.check(result.returncode == 0,
                         f"{name}: explain --head-fusion {fusion} --discard-ratio {discard:g} exit "
                         f"{result.returncode}: {result.stderr.strip()}")
            if result.returncode == 0:
                runs.append((variant_out, f"rollout {fusion} {discard:g}"))
        for maps_dir, variant in runs:
            with open(os.path.join(maps_dir, "index.json")) as f:
                entries = json.load(f)["maps"]
            for entry in entries:
                method = variant or entry["method"]
                ours = np.load(os.path.join(maps_dir, entry["map"]))
                ref = reference[method]
                checks.check(ours.dtype == np.float32 and ours.shape == ref.shape,
                             f"{name} {method}: map {ours.dtype} {ours.shape}, reference {ref.shape}")
                if ours.shape != ref.shape:
                    continue
                scale = float(np.abs(ref).max())
                error = float(np.abs(ours.astype(np.float64) - ref).max()) / max(scale, 1e-30)
                checks.check(scale > 0 and error <= TOLERANCE,
                             f"{name} {method}: max |vitpipe - reference| / max |reference| = {error:.2e} "
                             f"(limit {TOLERANCE:g}, largest value {scale:.3g})")
                checks.check(abs(entry["probability"] - probability) <= 1e-4,
                             f"{name} {method}: probability {entry['probability']:.6f} vs {probability:.6f}")
                print(f"{name:<34} {method:<17} {ours.shape[0]}x{ours.shape[1]}  rel. error {error:.2e}")
        with open(os.path.join(out, "index.json")) as f:
            index = json.load(f)

        # The overlay: gray (R = G = B) outside the crop's place, coloured inside it.
        entry = index["maps"][0]
        overlay = np.asarray(Image.open(os.path.join(out, entry["overlay"])).convert("RGB")).astype(int)
        scale = 3  # heatmap_overlay.h: a 96 x 40 image is drawn at 3x (reaching 256 pixels); the film at the left
        height, width = hf_families.resize_output_size(40, 96, processor.size)  # the resized image, before the crop
        left = (width - processor.crop_size["width"]) // 2 * 96 / width
        right = left + processor.crop_size["width"] * 96 / width
        chroma = np.abs(overlay - overlay.mean(axis=2, keepdims=True)).sum(axis=2)
        rows = slice(overlay.shape[0] // 4, overlay.shape[0] * 3 // 4)  # below the caption, above nothing else
        outside = chroma[rows, : int(left * scale) - 1]
        inside = chroma[rows, int(left * scale) + 2: int(right * scale) - 2]
        checks.check(outside.size > 0 and outside.max() == 0,
                     f"{name}: overlay left of the crop (x < {left * scale:.0f} of {overlay.shape[1]}) is gray "
                     f"(max chroma {outside.max() if outside.size else 'n/a'})")
        checks.check((inside > 0).mean() > 0.9,
                     f"{name}: overlay inside the crop is coloured ({(inside > 0).mean():.0%} of pixels)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return checks


if __name__ == "__main__":
    result = main()
    print(f"{result.count - len(result.failures)}/{result.count} checks passed")
    sys.exit(1 if result.failures or result.count == 0 else 0)
