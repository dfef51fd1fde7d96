#!/usr/bin/python3
"""Golden test: `vitpipe predict` on DeiT, DINOv2 and DINOv2-with-registers checkpoints with their processors
(DeiTImageProcessor: resize + centre crop; BitImageProcessor: shortest-edge resize + centre crop), against a
transcription of transformers' processors (hf_families.py) and models (tests/model/reference_families.py).

Checkpoints are written by Python the way save_pretrained writes them (never by vitpipe); images are predict_golden's
(gray, RGB, RGBA, palette, 16-bit, JPEG, odd sizes) and the three real 1024x1024 radiographs. The logits of
`vitpipe predict` must agree with the float32 reference to 1e-4 (absolute). Each case prints the same row as
predict_golden.py (without the one-level column).

usage: predict_families.py --case NAME [--keep DIR]
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_families  # noqa: E402
import hf_vit  # noqa: E402
import predict_golden as pg  # noqa: E402  (images, model writer, vitpipe runner)

TOLERANCE = 1e-4


def family_config(model_type, hidden, layers, heads, image, patch, labels, architecture, mlp=None, **options):
    """config.json as Dinov2Config / Dinov2WithRegistersConfig / DeiTConfig.save_pretrained write it."""
    j = {"architectures": [architecture], "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu",
         "hidden_dropout_prob": 0.0, "hidden_size": hidden, "image_size": image, "initializer_range": 0.02,
         "model_type": model_type, "num_attention_heads": heads, "num_channels": 3, "num_hidden_layers": layers,
         "patch_size": patch, "qkv_bias": True, "torch_dtype": "float32", "transformers_version": "4.46.0",
         "id2label": {str(i): n for i, n in enumerate(labels)}, "label2id": {n: i for i, n in enumerate(labels)},
         "problem_type": "multi_label_classification"}
    if model_type.startswith("dinov2"):
        j.update({"layer_norm_eps": 1e-6, "layerscale_value": 1.0, "mlp_ratio": 4, "drop_path_rate": 0.0,
                  "use_swiglu_ffn": options.get("swiglu", False)})
        if model_type == "dinov2":
            j["use_mask_token"] = True
        else:
            j["num_register_tokens"] = options.get("registers", 4)
    else:
        j.update({"layer_norm_eps": 1e-12, "intermediate_size": mlp, "encoder_stride": patch})
    return j


def family_state_dict(c, seed):
    """The family's ...ForImageClassification state dict with trained-like scales (see predict_golden.state_dict)."""
    g = torch.Generator().manual_seed(seed)
    d, p, model_type = c["hidden_size"], c["patch_size"], c["model_type"]
    dino = model_type.startswith("dinov2")
    swiglu = c.get("use_swiglu_ffn", False)
    if dino:
        hidden = int(d * c["mlp_ratio"])
        mlp = (int(hidden * 2 / 3) + 7) // 8 * 8 if swiglu else hidden
    else:
        mlp = c["intermediate_size"]

    def normal(shape, std, mean=0.0):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * std + mean).float()

    pre = {"dinov2": "dinov2.", "dinov2_with_registers": "dinov2_with_registers.", "deit": "deit."}[model_type]
    e = pre + "embeddings."
    grid = c["image_size"] // p
    s = {e + "cls_token": normal((1, 1, d), 0.3)}
    if model_type == "deit":
        s[e + "distillation_token"] = normal((1, 1, d), 0.3)
    else:
        s[e + "mask_token"] = normal((1, d), 0.3)
    if model_type == "dinov2_with_registers":
        s[e + "register_tokens"] = normal((1, c["num_register_tokens"], d), 0.3)
    s[e + "position_embeddings"] = normal((1, grid * grid + (2 if model_type == "deit" else 1), d), 0.3)
    s[e + "patch_embeddings.projection.weight"] = normal((d, 3, p, p), 1.0 / math.sqrt(3 * p * p))
    s[e + "patch_embeddings.projection.bias"] = normal((d,), 0.1)
    for layer in range(c["num_hidden_layers"]):
        b = f"{pre}encoder.layer.{layer}."
        n1, n2 = ("norm1", "norm2") if dino else ("layernorm_before", "layernorm_after")
        for norm in (n1, n2):
            s[b + norm + ".weight"] = normal((d,), 0.3, 1.0)
            s[b + norm + ".bias"] = normal((d,), 0.1)
        for which, scale in (("query", 2.0), ("key", 2.0), ("value", 1.0)):
            s[b + f"attention.attention.{which}.weight"] = normal((d, d), scale / math.sqrt(d))
            s[b + f"attention.attention.{which}.bias"] = normal((d,), 0.1)
        s[b + "attention.output.dense.weight"] = normal((d, d), 1.0 / math.sqrt(d))
        s[b + "attention.output.dense.bias"] = normal((d,), 0.1)
        fc1, fc2 = ("mlp.weights_in", "mlp.weights_out") if swiglu else ("mlp.fc1", "mlp.fc2") if dino else \
            ("intermediate.dense", "output.dense")
        rows = 2 * mlp if swiglu else mlp
        s[b + fc1 + ".weight"] = normal((rows, d), 1.0 / math.sqrt(d))
        s[b + fc1 + ".bias"] = normal((rows,), 0.1)
        s[b + fc2 + ".weight"] = normal((d, mlp), 1.0 / math.sqrt(mlp))
        s[b + fc2 + ".bias"] = normal((d,), 0.1)
        if dino:
            s[b + "layer_scale1.lambda1"] = normal((d,), 0.2, 0.7)
            s[b + "layer_scale2.lambda1"] = normal((d,), 0.2, 0.7)
    s[pre + "layernorm.weight"] = normal((d,), 0.3, 1.0)
    s[pre + "layernorm.bias"] = normal((d,), 0.1)
    n = len(c["id2label"])
    if c["architectures"][0] == "DeiTForImageClassificationWithTeacher":
        for head in ("cls_classifier", "distillation_classifier"):
            s[head + ".weight"] = normal((n, d), 2.0 / math.sqrt(d))
            s[head + ".bias"] = normal((n,), 0.3)
    else:
        s["classifier.weight"] = normal((n, 2 * d if dino else d), 2.0 / math.sqrt(d))
        s["classifier.bias"] = normal((n,), 0.3)
    return s


def bit_processor(shortest, crop, mean, std):
    return {"crop_size": {"height": crop, "width": crop}, "do_center_crop": True, "do_convert_rgb": True,
            "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": mean,
            "image_processor_type": "BitImageProcessor", "image_std": std, "resample": 3,
            "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": shortest}}


def deit_processor(size, crop, old_form=False):
    if old_form:  # facebook/deit-*: "size": 256, "crop_size": 224, DeiTFeatureExtractor
        return {"crop_size": crop, "do_center_crop": True, "do_normalize": True, "do_resize": True,
                "feature_extractor_type": "DeiTFeatureExtractor", "image_mean": [0.485, 0.456, 0.406],
                "image_std": [0.229, 0.224, 0.225], "resample": 3, "size": size}
    return {"crop_size": {"height": crop, "width": crop}, "do_center_crop": True, "do_normalize": True,
            "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
            "image_processor_type": "DeiTImageProcessor", "image_std": [0.5, 0.5, 0.5], "resample": 2,
            "rescale_factor": 1 / 255, "size": {"height": size, "width": size}}


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
RAD_DINO = ([0.5307] * 3, [0.2583] * 3)

# name: (config, seed, preprocessor). DINOv2 is fed what its processor crops, its positions interpolated per pass.
CASES = {
    # facebook/dinov2-*'s processing (shortest edge 256 -> crop 224, ratio kept), a 6x6 grid fed at 4x4.
    "dinov2-bit-interpolated": (family_config("dinov2", 48, 2, 4, 42, 7, pg.CHESTXRAY14, "Dinov2ForImageClassification"),
                                21, bit_processor(32, 28, *IMAGENET)),
    # RAD-DINO's processing (shortest edge = crop, its mean/std) at the native grid, SwiGLU.
    "dinov2-swiglu-rad-dino-processor": (family_config("dinov2", 32, 2, 2, 35, 7, pg.CHESTXRAY14[:4],
                                                       "Dinov2ForImageClassification", swiglu=True),
                                         22, bit_processor(35, 35, *RAD_DINO)),
    # Registers; antialiased interpolation of a 6x6 grid down to 5x5.
    "dinov2-registers-bit": (family_config("dinov2_with_registers", 32, 2, 4, 42, 7, pg.CHESTXRAY14[:5],
                                           "Dinov2WithRegistersForImageClassification", registers=3),
                             23, bit_processor(40, 35, *IMAGENET)),
    # Distilled DeiT with both heads averaged; DeiTFeatureExtractor's old "size": int form.
    "deit-distilled-crop": (family_config("deit", 48, 2, 3, 32, 8, pg.CHESTXRAY14[:6],
                                          "DeiTForImageClassificationWithTeacher", mlp=96),
                            24, deit_processor(36, 32, old_form=True)),
    # DeiTForImageClassification: the distillation token stays in the sequence, token 0 classified.
    "deit-with-token-crop": (family_config("deit", 32, 2, 2, 32, 16, pg.CHESTXRAY14, "DeiTForImageClassification",
                                           mlp=64), 25, deit_processor(40, 32)),
}


def run_case(name, root, checks):
    config, seed, preprocessor = CASES[name]
    directory = pg.write_model(os.path.join(root, name), config, family_state_dict(config, seed), preprocessor)
    images = pg.make_images(os.path.join(root, "images"))
    processor = hf_families.Processor.from_file(os.path.join(directory, "preprocessor_config.json"))
    params32, cfg, _ = hf_families.load_pretrained(directory, torch.float32)
    params64, _, _ = hf_families.load_pretrained(directory, torch.float64)
    pixels = torch.from_numpy(np.stack([processor.preprocess(hf_vit.load_image(p)) for p in images]))
    ref32 = hf_families.logits(params32, cfg, pixels)
    ref64 = hf_families.logits(params64, cfg, pixels.double())
    lines = pg.predict(directory, images).splitlines()
    checks.check(len(lines) == len(images), f"{name}: {len(lines)} json lines for {len(images)} images")
    records = [json.loads(line) for line in lines]
    ours = torch.tensor([r["logits"] for r in records], dtype=torch.float64)
    checks.check(ours.shape == ref32.shape, f"{name}: logits {tuple(ours.shape)} vs {tuple(ref32.shape)}")
    if ours.shape != ref32.shape:
        return
    diff32 = (ours - ref32.double()).abs()
    worst = diff32.max().item()
    worst_image = os.path.basename(images[int(diff32.max(dim=1).values.argmax())])
    scale = ref64.abs().max().item()
    checks.check(worst <= TOLERANCE, f"{name}: max |vitpipe - transformers fp32| = {worst:.3g} > {TOLERANCE:g} "
                                     f"(at {worst_image})")
    gray = [i for i, p in enumerate(images) if "gray" in os.path.basename(p) or p.endswith("_000.png")]
    print(f"{name:<36} {len(images):>3} {pixels.shape[-1]:>4} {worst:10.2e} {worst / scale:10.2e} "
          f"{(ours - ref64).abs().max().item():10.2e} {(ref32.double() - ref64).abs().max().item():10.2e} "
          f"{scale:8.3f}   (gray/radiograph rows {len(gray)}, 1024x1024: "
          f"{sum(1 for p in images if os.path.dirname(p) == pg.FULL_SIZE)})")
    ours_p = torch.tensor([[r["probabilities"][config["id2label"][str(i)]] for i in range(len(config["id2label"]))]
                           for r in records], dtype=torch.float64)
    checks.check((ours_p - torch.sigmoid(ref64)).abs().max().item() <= TOLERANCE, f"{name}: probabilities")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--keep")
    a = ap.parse_args()
    torch.set_num_threads(2)
    root = a.keep or tempfile.mkdtemp(prefix="vitpipe_predict_families_")
    if a.keep and os.path.exists(root):
        shutil.rmtree(root)
    checks = pg.Checks()
    print(f"{'case':<36} {'img':>3} {'size':>4} {'|d| fp32':>10} {'rel':>10} {'|d| fp64':>10} {'fp32-fp64':>10} "
          f"{'max|z|':>8}")
    try:
        run_case(a.case, root, checks)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{checks.count - len(checks.failures)}/{checks.count} checks passed")
    sys.exit(1 if checks.failures or checks.count == 0 else 0)


if __name__ == "__main__":
    main()
