#!/usr/bin/env python3
"""Golden test: vitpipe's forward, loss and every parameter gradient against a PyTorch reference ViT.

The reference is Hugging Face's ViTForImageClassification written out in plain torch (transformers is not a Debian
package): Conv2d patch embedding, CLS first, learned position embeddings, pre-LayerNorm blocks with separate q/k/v,
exact GELU, final LayerNorm, classifier on the CLS token; BCE-with-logits (mean) or cross-entropy (mean). It runs in
float64, so the comparison measures vitpipe's error, not the reference's.

usage: reference_vit.py --probe PATH --case NAME [--keep DIR]
"""
import argparse, json, math, os, subprocess, sys, tempfile

import numpy as np
import torch
import torch.nn.functional as F

CASES = {
    # name: (probe arguments, relative tolerance)
    "fp32-basic": (["--hidden", "32", "--heads", "4", "--layers", "2", "--mlp", "64", "--image", "16", "--patch", "4",
                    "--labels", "5", "--batch", "3"], 1e-5),
    "fp32-no-qkv-bias-single-label": (["--hidden", "48", "--heads", "3", "--layers", "3", "--mlp", "96", "--image", "24",
                                       "--patch", "8", "--qkv-bias", "false", "--labels", "4", "--batch", "2",
                                       "--problem", "single"], 1e-5),
    "fp32-one-channel-big-patch": (["--hidden", "64", "--heads", "2", "--layers", "1", "--mlp", "128", "--image", "32",
                                    "--patch", "16", "--channels", "1", "--labels", "3", "--batch", "4",
                                    "--eps", "1e-6"], 1e-5),
    "fp32-stages-and-accumulation": (["--hidden", "32", "--heads", "2", "--layers", "4", "--mlp", "48", "--image", "16",
                                      "--patch", "8", "--labels", "6", "--batch", "4", "--micro-batch", "2",
                                      "--stages", "4"], 1e-5),
    "fp32-recompute-head-only-stage": (["--hidden", "32", "--heads", "4", "--layers", "2", "--mlp", "64", "--image", "16",
                                        "--patch", "4", "--labels", "5", "--batch", "3", "--recompute",
                                        "--stages", "4"], 1e-5),
    "fp32-vit-micro-shape": (["--hidden", "64", "--heads", "4", "--layers", "2", "--mlp", "128", "--image", "32",
                              "--patch", "8", "--labels", "14", "--batch", "5", "--threads", "2"], 1e-5),
    "bf16-basic": (["--hidden", "32", "--heads", "4", "--layers", "2", "--mlp", "64", "--image", "16", "--patch", "4",
                    "--labels", "5", "--batch", "3", "--precision", "bf16"], 3e-2),
    # ZB-H1's split backward: input gradients (B), then each micro-batch's weight GEMMs (W) after the next one's B.
    "fp32-split-backward-stages": (["--hidden", "32", "--heads", "2", "--layers", "3", "--mlp", "48", "--image", "16",
                                    "--patch", "8", "--labels", "6", "--batch", "6", "--micro-batch", "2",
                                    "--stages", "3", "--split-backward"], 1e-5),
    "bf16-split-backward-single": (["--hidden", "48", "--heads", "3", "--layers", "2", "--mlp", "96", "--image", "24",
                                    "--patch", "8", "--labels", "4", "--batch", "4", "--micro-batch", "2",
                                    "--stages", "2", "--split-backward", "--problem", "single",
                                    "--precision", "bf16"], 3e-2),
    # 64-wide heads (ViT's), which the tile attention takes in bf16 (kernels/attention_tiles.cpp; run emulated too).
    "bf16-head-64": (["--hidden", "64", "--heads", "1", "--layers", "2", "--mlp", "128", "--image", "48", "--patch", "8",
                      "--labels", "14", "--batch", "3", "--precision", "bf16"],
                     3e-2),
    "bf16-stages-recompute-single": (["--hidden", "48", "--heads", "3", "--layers", "3", "--mlp", "96", "--image", "24",
                                      "--patch", "8", "--labels", "4", "--batch", "4", "--micro-batch", "2",
                                      "--stages", "3", "--recompute", "--problem", "single", "--precision", "bf16"],
                                     3e-2),
}


def arg(args, name, default):
    return type(default)(args[args.index(name) + 1]) if name in args else default


def load_dump(path):
    index = json.load(open(os.path.join(path, "index.json")))
    data = np.fromfile(os.path.join(path, "data.f32"), dtype="<f4")
    out = {}
    for name, entry in index.items():
        if name == "config":  # what the run was (reference_families.py reads it), not a tensor
            continue
        n = int(np.prod(entry["shape"])) if entry["shape"] else 1
        out[name] = torch.from_numpy(data[entry["offset"]:entry["offset"] + n].astype(np.float64)).reshape(entry["shape"])
    return out


def reference(params, images, targets, cfg):
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    d, heads, layers, eps = cfg["hidden"], cfg["heads"], cfg["layers"], cfg["eps"]
    b = images.shape[0]
    x = F.conv2d(images, p["vit.embeddings.patch_embeddings.projection.weight"],
                 p["vit.embeddings.patch_embeddings.projection.bias"], stride=cfg["patch"])
    x = x.flatten(2).transpose(1, 2)
    x = torch.cat([p["vit.embeddings.cls_token"].expand(b, -1, -1), x], dim=1) + p["vit.embeddings.position_embeddings"]
    hd = d // heads
    for layer in range(layers):
        pre = f"vit.encoder.layer.{layer}."
        y = F.layer_norm(x, (d,), p[pre + "layernorm_before.weight"], p[pre + "layernorm_before.bias"], eps)

        def proj(which):
            bias = p.get(pre + f"attention.attention.{which}.bias")
            z = F.linear(y, p[pre + f"attention.attention.{which}.weight"], bias)
            return z.view(b, -1, heads, hd).transpose(1, 2)

        q, k, v = proj("query"), proj("key"), proj("value")
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(b, -1, d)
        x = x + F.linear(ctx, p[pre + "attention.output.dense.weight"], p[pre + "attention.output.dense.bias"])
        y = F.layer_norm(x, (d,), p[pre + "layernorm_after.weight"], p[pre + "layernorm_after.bias"], eps)
        y = F.gelu(F.linear(y, p[pre + "intermediate.dense.weight"], p[pre + "intermediate.dense.bias"]))
        x = x + F.linear(y, p[pre + "output.dense.weight"], p[pre + "output.dense.bias"])
    x = F.layer_norm(x, (d,), p["vit.layernorm.weight"], p["vit.layernorm.bias"], eps)
    logits = F.linear(x[:, 0], p["classifier.weight"], p["classifier.bias"])
    if cfg["problem"] == "single":
        loss = F.cross_entropy(logits, targets.long())
    else:
        loss = F.binary_cross_entropy_with_logits(logits, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad for k, v in p.items()}


def relative_error(ours, ref, floor=1e-12):
    return float((ours - ref).norm() / max(float(ref.norm()), floor))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--keep")
    a = ap.parse_args()
    args, tolerance = CASES[a.case]
    out = a.keep or tempfile.mkdtemp(prefix="vitpipe-golden-")
    subprocess.run([a.probe, *args, "--out", out], check=True)
    dump = load_dump(out)
    cfg = {"hidden": arg(args, "--hidden", 0), "heads": arg(args, "--heads", 0), "layers": arg(args, "--layers", 0),
           "patch": arg(args, "--patch", 0), "eps": arg(args, "--eps", 1e-12), "problem": arg(args, "--problem", "multi")}
    params = {k[len("param."):]: v for k, v in dump.items() if k.startswith("param.")}
    logits, loss, grads = reference(params, dump["images"], dump["targets"], cfg)

    failures = []
    errors = []
    worst = 0.0

    def check(name, ours, ref):
        nonlocal worst
        floor = 1e-12
        if name.endswith("attention.attention.key.bias"):
            # Exactly zero in exact arithmetic (softmax ignores the per-row constant q.b_k), so both sides are
            # rounding noise: measure it against the same layer's query-bias gradient, its natural scale.
            floor = float(grads[name[len("grad "):].replace(".key.", ".query.")].norm())
        err = relative_error(ours, ref, floor)
        errors.append((err, name))
        worst = max(worst, err)
        if not err <= tolerance:
            failures.append(f"{name}: relative error {err:.3g} > {tolerance:g}")

    check("logits", dump["logits"], logits)
    check("loss", dump["loss"].reshape(()), loss)
    missing = [k for k in params if "grad." + k not in dump]
    if missing:
        failures.append(f"no gradient dumped for {missing}")
    for name, ref in grads.items():
        if "grad." + name in dump:
            check("grad " + name, dump["grad." + name], ref)
    print(f"{a.case}: {len(grads)} parameter gradients + logits + loss, worst relative error {worst:.3g} "
          f"(tolerance {tolerance:g}); largest: " + ", ".join(f"{n} {e:.2g}" for e, n in sorted(errors)[-3:]))
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
