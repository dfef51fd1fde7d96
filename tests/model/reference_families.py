#!/usr/bin/env python3
"""Golden test for the model families: vitpipe's forward, loss and every trainable parameter's gradient against a
float64 PyTorch transcription of transformers' models (transformers and peft are not Debian packages):

  DeiT (models/deit/modeling_deit.py): DeiTEmbeddings puts [CLS, DIST] before the patches, position embeddings for
    all of them; DeiTForImageClassification classifies token 0, DeiTForImageClassificationWithTeacher averages
    cls_classifier(token 0) and distillation_classifier(token 1).
  DINOv2 (models/dinov2/modeling_dinov2.py): Dinov2Layer = norm1 -> attention -> layer_scale1 -> residual,
    norm2 -> mlp (Dinov2MLP fc1/GELU/fc2, or Dinov2SwiGLUFFN weights_in -> silu(x1) * x2 -> weights_out) ->
    layer_scale2 -> residual; position embeddings interpolated to the input's grid in every forward pass
    (interpolate_pos_encoding: bicubic, align_corners=False, by output size); Dinov2ForImageClassification's
    classifier on concat(CLS, mean of the patch tokens) of the final LayerNorm.
  DINOv2 with registers (models/dinov2_with_registers/modeling_dinov2_with_registers.py): register tokens inserted
    after CLS once positions are added; the interpolation uses antialias=True; the patch mean skips the registers.
  LoRA (peft tuners/lora/layer.py): y = base(x) + lora_B(lora_A(x)) * lora_alpha / r.
  Frozen modes: only the parameters that train get gradients; the set vitpipe dumped must be exactly that set.

usage: reference_families.py --probe PATH --case NAME [--keep DIR]
"""
import argparse, math, os, sys, subprocess, tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_vit as rv  # noqa: E402  (the dump reader and the comparison)

BASE = ["--hidden", "32", "--heads", "4", "--layers", "2", "--mlp", "64", "--patch", "4", "--labels", "5",
        "--batch", "3"]
CASES = {
    # name: (probe arguments, relative tolerance)
    "dinov2-native-grid": (BASE + ["--family", "dinov2", "--image", "16", "--eps", "1e-6"], 1e-5),
    "dinov2-interpolated-grid": (BASE + ["--family", "dinov2", "--image", "24", "--input-image", "16",
                                         "--eps", "1e-6"], 1e-5),
    "dinov2-upsampled-grid-stages": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family", "dinov2",
                                                  "--image", "16", "--input-image", "24", "--stages", "4"], 1e-5),
    "dinov2-swiglu-recompute": (BASE + ["--family", "dinov2", "--swiglu", "--image", "16", "--recompute",
                                        "--problem", "single"], 1e-5),
    "dinov2-registers-native": (BASE + ["--family", "dinov2-registers", "--registers", "4", "--image", "16"], 1e-5),
    "dinov2-registers-interpolated": (BASE + ["--family", "dinov2-registers", "--registers", "2", "--image", "24",
                                              "--input-image", "16", "--stages", "2"], 1e-5),
    "deit-with-token": (BASE + ["--family", "deit", "--image", "16"], 1e-5),
    "deit-distilled-teacher": (BASE + ["--family", "deit-teacher", "--image", "16", "--stages", "3"], 1e-5),
    "lora-vit-qv": (BASE + ["--family", "vit", "--image", "16", "--lora", "4", "--lora-alpha", "8"], 1e-5),
    "lora-dinov2-all-recompute": (BASE + ["--family", "dinov2", "--image", "16", "--lora", "3",
                                          "--lora-targets", "query,key,value,projection,fc1,fc2", "--recompute",
                                          "--stages", "2"], 1e-5),
    "lora-deit-teacher-all": (BASE + ["--family", "deit-teacher", "--image", "16", "--lora", "2",
                                      "--lora-targets", "query,key,value,projection,fc1,fc2"], 1e-5),
    "freeze-backbone-dinov2": (BASE + ["--family", "dinov2", "--image", "16", "--freeze", "backbone"], 1e-5),
    "freeze-layers-vit-stages": (BASE[:4] + ["--layers", "3"] + BASE[6:] + ["--family", "vit", "--image", "16",
                                                                           "--freeze", "layers", "--freeze-layers",
                                                                           "2", "--stages", "3"], 1e-5),
    "bf16-dinov2-registers-interpolated": (BASE + ["--family", "dinov2-registers", "--registers", "2", "--image", "24",
                                                   "--input-image", "16", "--precision", "bf16"], 3e-2),
    "bf16-deit-teacher-lora": (BASE + ["--family", "deit-teacher", "--image", "16", "--lora", "4",
                                       "--lora-targets", "query,value,fc2", "--precision", "bf16"], 3e-2),
    "bf16-dinov2-swiglu": (BASE + ["--family", "dinov2", "--swiglu", "--image", "16", "--precision", "bf16"], 3e-2),
    # Three AdamW steps: frozen parameters keep their bits, the trained ones follow the reference trajectory.
    "trajectory-freeze-layers-dinov2": (BASE + ["--family", "dinov2", "--image", "24", "--input-image", "16",
                                                "--freeze", "layers", "--freeze-layers", "1", "--steps", "3",
                                                "--stages", "2"], 1e-4),
    "trajectory-freeze-backbone-deit": (BASE + ["--family", "deit-teacher", "--image", "16", "--freeze", "backbone",
                                                "--steps", "3"], 1e-4),
    "trajectory-lora-vit": (BASE + ["--family", "vit", "--image", "16", "--lora", "4",
                                    "--lora-targets", "query,value,fc1", "--steps", "3"], 1e-4),
    # The split backward of zb-h1 (backward_input, then backward_weight after the next micro-batch's B): the weight
    # GEMMs and LoRA A/B gradients deferred, LayerScale / SwiGLU / registers / distillation token / frozen parts.
    "split-dinov2-registers-swiglu-stages": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family",
                                                          "dinov2-registers", "--registers", "2", "--swiglu",
                                                          "--image", "24", "--input-image", "16", "--stages", "2",
                                                          "--split-backward"], 1e-5),
    "split-dinov2-one-stage": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family", "dinov2", "--image",
                                            "16", "--split-backward"], 1e-5),
    "split-deit-teacher-stages": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family", "deit-teacher",
                                               "--image", "16", "--stages", "3", "--split-backward"], 1e-5),
    "split-lora-dinov2-all-stages": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family", "dinov2",
                                                  "--swiglu", "--image", "16", "--lora", "3", "--lora-targets",
                                                  "query,key,value,projection,fc1,fc2", "--stages", "2",
                                                  "--split-backward"], 1e-5),
    "split-lora-vit-stages": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family", "vit", "--image", "16",
                                           "--lora", "4", "--lora-alpha", "8", "--lora-targets",
                                           "query,value,projection,fc2", "--stages", "2", "--split-backward"], 1e-5),
    "split-freeze-backbone-deit-teacher": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family",
                                                        "deit-teacher", "--image", "16", "--freeze", "backbone",
                                                        "--stages", "2", "--split-backward"], 1e-5),
    "split-freeze-layers-vit-stages": (BASE[:4] + ["--layers", "3"] + BASE[6:-2] + ["--batch", "4", "--micro-batch",
                                                                                   "2", "--family", "vit", "--image",
                                                                                   "16", "--freeze", "layers",
                                                                                   "--freeze-layers", "1", "--stages",
                                                                                   "2", "--split-backward"], 1e-5),
    "bf16-split-dinov2-swiglu": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family", "dinov2", "--swiglu",
                                              "--image", "16", "--stages", "2", "--precision", "bf16",
                                              "--split-backward"], 3e-2),
    "bf16-split-deit-teacher-lora": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family", "deit-teacher",
                                                  "--image", "16", "--lora", "4", "--lora-targets", "query,value,fc2",
                                                  "--stages", "2", "--precision", "bf16", "--split-backward"], 3e-2),
    "split-trajectory-lora-dinov2-registers": (BASE[:-2] + ["--batch", "4", "--micro-batch", "2", "--family",
                                                            "dinov2-registers", "--registers", "2", "--image", "16",
                                                            "--lora", "4", "--lora-targets", "query,value,fc2",
                                                            "--steps", "3", "--stages", "2", "--split-backward"],
                                               1e-4),
}


def prefix_of(model_type):
    return {"vit": "vit.", "deit": "deit.", "dinov2": "dinov2.", "dinov2_with_registers": "dinov2_with_registers."}[
        model_type]


def interpolate_positions(pos, kept, grid, antialias):
    """Dinov2Embeddings.interpolate_pos_encoding (antialias=True: the registers variant), by output size."""
    d = pos.shape[-1]
    side = int(math.sqrt(pos.shape[1] - kept))
    patch = pos[:, kept:].reshape(1, side, side, d).permute(0, 3, 1, 2)
    patch = F.interpolate(patch, size=(grid, grid), mode="bicubic", align_corners=False, antialias=antialias)
    return torch.cat([pos[:, :kept], patch.permute(0, 2, 3, 1).reshape(1, -1, d)], dim=1)


def reference(params, images, targets, cfg, trainable):
    p = {k: v.clone().requires_grad_(k in trainable) for k, v in params.items()}
    logits, loss = forward(p, images, targets, cfg)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad for k, v in p.items() if k in trainable}


def trajectory(params, images, targets, cfg, trainable, steps, lr):
    """torch.optim.AdamW (defaults, weight decay 0) on what trains, the same batch each step, in float64."""
    p = {k: v.clone().requires_grad_(k in trainable) for k, v in params.items()}
    optimizer = torch.optim.AdamW([p[k] for k in sorted(trainable)], lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.0)
    for _ in range(steps):
        optimizer.zero_grad()
        forward(p, images, targets, cfg)[1].backward()
        optimizer.step()
    return {k: v.detach() for k, v in p.items()}


def forward(p, images, targets, cfg):
    """The model's logits (and the loss of `targets`, unless None) for pixel_values `images`."""
    model_type, d, heads, eps = cfg["model_type"], cfg["hidden"], cfg["heads"], cfg["eps"]
    pre = prefix_of(model_type)
    dino = model_type.startswith("dinov2")
    registers = cfg["registers"]
    lora_scale = cfg["lora_scale"]
    b = images.shape[0]

    def linear(x, module):
        y = F.linear(x, p[module + ".weight"], p.get(module + ".bias"))
        if module + ".lora_A.weight" in p:  # peft: base(x) + lora_B(lora_A(dropout(x))) * scaling
            y = y + F.linear(F.linear(x, p[module + ".lora_A.weight"]), p[module + ".lora_B.weight"]) * lora_scale
        return y

    e = pre + "embeddings."
    x = F.conv2d(images, p[e + "patch_embeddings.projection.weight"], p[e + "patch_embeddings.projection.bias"],
                 stride=cfg["patch"]).flatten(2).transpose(1, 2)
    pos = p[e + "position_embeddings"]
    if model_type == "deit":
        x = torch.cat([p[e + "cls_token"].expand(b, -1, -1), p[e + "distillation_token"].expand(b, -1, -1), x], 1)
        x = x + pos  # DeiT interpolates only when asked (interpolate_pos_encoding=True); vitpipe resizes at load
    else:
        x = torch.cat([p[e + "cls_token"].expand(b, -1, -1), x], 1)
        if dino and x.shape[1] - 1 != pos.shape[1] - 1:
            pos = interpolate_positions(pos, 1, int(math.sqrt(x.shape[1] - 1)), model_type == "dinov2_with_registers")
        x = x + pos
        if registers:
            x = torch.cat([x[:, :1], p[e + "register_tokens"].expand(b, -1, -1), x[:, 1:]], 1)
    hd = d // heads
    for layer in range(cfg["layers"]):
        blk = pre + f"encoder.layer.{layer}."
        n1, n2 = ("norm1", "norm2") if dino else ("layernorm_before", "layernorm_after")
        y = F.layer_norm(x, (d,), p[blk + n1 + ".weight"], p[blk + n1 + ".bias"], eps)

        def heads_of(which):
            return linear(y, blk + f"attention.attention.{which}").view(b, -1, heads, hd).transpose(1, 2)

        q, k, v = heads_of("query"), heads_of("key"), heads_of("value")
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(b, -1, d)
        a = linear(ctx, blk + "attention.output.dense")
        x = x + (a * p[blk + "layer_scale1.lambda1"] if dino else a)
        y = F.layer_norm(x, (d,), p[blk + n2 + ".weight"], p[blk + n2 + ".bias"], eps)
        if dino and cfg["swiglu"]:
            h = linear(y, blk + "mlp.weights_in")
            x1, x2 = h.chunk(2, dim=-1)
            m = linear(F.silu(x1) * x2, blk + "mlp.weights_out")
        elif dino:
            m = linear(F.gelu(linear(y, blk + "mlp.fc1")), blk + "mlp.fc2")
        else:
            m = linear(F.gelu(linear(y, blk + "intermediate.dense")), blk + "output.dense")
        x = x + (m * p[blk + "layer_scale2.lambda1"] if dino else m)
    x = F.layer_norm(x, (d,), p[pre + "layernorm.weight"], p[pre + "layernorm.bias"], eps)
    if dino:
        features = torch.cat([x[:, 0], x[:, 1 + registers:].mean(dim=1)], dim=1)
        logits = F.linear(features, p["classifier.weight"], p["classifier.bias"])
    elif "cls_classifier.weight" in p:
        logits = (F.linear(x[:, 0], p["cls_classifier.weight"], p["cls_classifier.bias"]) +
                  F.linear(x[:, 1], p["distillation_classifier.weight"], p["distillation_classifier.bias"])) / 2
    else:
        logits = F.linear(x[:, 0], p["classifier.weight"], p["classifier.bias"])
    if targets is None:
        return logits, None
    if cfg["problem"] == "single":
        loss = F.cross_entropy(logits, targets.long())
    else:
        loss = F.binary_cross_entropy_with_logits(logits, targets)
    return logits, loss


def expected_trainable(names, args, model_type):
    """The parameters each mode trains (peft marks lora_* and modules_to_save; the freeze modes as documented)."""
    pre = prefix_of(model_type)
    mask = pre + "embeddings.mask_token"
    head = lambda n: n.startswith(("classifier.", "cls_classifier.", "distillation_classifier."))
    lora = "--lora" in args
    freeze = rv.arg(args, "--freeze", "none")
    frozen_layers = rv.arg(args, "--freeze-layers", 0)

    def segment(n):
        if n.startswith(pre + "embeddings."):
            return 0
        if n.startswith(pre + "encoder.layer."):
            return int(n[len(pre + "encoder.layer."):].split(".")[0]) + 1
        return 1 << 30
    out = set()
    for n in names:
        if n == mask:
            continue
        if lora:
            ok = ".lora_" in n or head(n)
        elif freeze == "backbone":
            ok = head(n)
        elif freeze == "layers":
            ok = segment(n) > frozen_layers
        else:
            ok = True
        if ok:
            out.add(n)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--keep")
    a = ap.parse_args()
    args, tolerance = CASES[a.case]
    out = a.keep or tempfile.mkdtemp(prefix="vitpipe-golden-")
    subprocess.run([a.probe, *args, "--out", out], check=True)
    dump = rv.load_dump(out)
    import json
    info = json.load(open(os.path.join(out, "index.json")))["config"]
    cfg = {"hidden": rv.arg(args, "--hidden", 0), "heads": rv.arg(args, "--heads", 0),
           "layers": rv.arg(args, "--layers", 0), "patch": rv.arg(args, "--patch", 0),
           "eps": rv.arg(args, "--eps", 1e-12), "problem": rv.arg(args, "--problem", "multi"),
           "model_type": info["model_type"], "registers": info["registers"], "swiglu": info["swiglu"],
           "lora_scale": info["lora_scale"]}
    params = {k[len("param."):]: v for k, v in dump.items() if k.startswith("param.")}
    dumped = {k[len("grad."):] for k in dump if k.startswith("grad.")}
    trainable = expected_trainable(params, args, cfg["model_type"])
    failures = []
    if dumped != trainable:
        failures.append(f"vitpipe trains {sorted(dumped - trainable)} it should not and not {sorted(trainable - dumped)}")
    logits, loss, grads = reference(params, dump["images"], dump["targets"], cfg, trainable)
    errors = []
    worst = 0.0

    def check(name, ours, ref, query_ref=None):
        nonlocal worst
        floor = 1e-12
        if name.endswith("attention.attention.key.bias"):  # exactly zero: rounding noise on both sides
            parameter = name.split(" ", 1)[1].replace(".key.", ".query.")
            floor = float((grads[parameter] if query_ref is None else query_ref(parameter)).norm())
        err = rv.relative_error(ours, ref, floor)
        errors.append((err, name))
        worst = max(worst, err)
        if not err <= tolerance:
            failures.append(f"{name}: relative error {err:.3g} > {tolerance:g}")

    check("logits", dump["logits"], logits)
    check("loss", dump["loss"].reshape(()), loss)
    for name, ref in grads.items():
        if "grad." + name in dump:
            check("grad " + name, dump["grad." + name], ref)
    steps = rv.arg(args, "--steps", 0)
    if steps:
        # Frozen: the very same bits. Trained: the update (final - initial) as the reference's trajectory.
        final = trajectory(params, dump["images"], dump["targets"], cfg, trainable, steps, rv.arg(args, "--lr", 1e-3))
        for name, value in params.items():
            ours = dump["final." + name]
            if name not in trainable:
                if not torch.equal(ours, value):
                    failures.append(f"{name} is frozen but changed (max |change| {float((ours - value).abs().max()):.3g})")
            else:
                check(f"update {name}", ours - value, final[name] - value, lambda q: final[q] - params[q])
    print(f"{a.case}: {info['model_type']}, {len(grads)} trained parameter gradients + logits + loss, worst relative "
          f"error {worst:.3g} (tolerance {tolerance:g}); largest: "
          + ", ".join(f"{n} {e:.2g}" for e, n in sorted(errors)[-3:]))
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
