#!/usr/bin/python3
"""`vitpipe export --format onnx` run in the real ONNX Runtime (onnxruntime-node from npm, tests/onnx/ort_run.js):
its logits must equal `vitpipe predict`'s on the same images within 1e-4, at batch 1 and 5. Checkpoints are written
by Python (predict_golden / predict_families / predict_peft writers); pixel values come from the transcribed
transformers processors (hf_vit.py, hf_families.py), which the predict golden tests hold equal to vitpipe's. Debian's
python3-onnx checks each file (full check, with shape inference) and its metadata (id2label, preprocessor, source).

usage: onnx_export.py --case NAME
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PREDICT = os.path.join(HERE, "..", "predict")
sys.path.insert(0, PREDICT)
sys.path.insert(0, os.path.join(HERE, "..", "io"))
sys.path.insert(0, os.path.join(HERE, "..", "image"))
import hf_families  # noqa: E402
import hf_vit  # noqa: E402
import predict_families as pf  # noqa: E402
import predict_golden as pg  # noqa: E402
import predict_peft as pp  # noqa: E402

TOLERANCE = 1e-4
RUNNER = os.path.join(HERE, "ort_run.js")


vitpipe = pg.vitpipe


def ort_logits(model, pixels, root):
    path = os.path.join(root, "pixels.f32")
    pixels.astype(np.float32).tofile(path)
    result = subprocess.run(["node", RUNNER, model, path, ",".join(map(str, pixels.shape))], capture_output=True,
                            text=True, cwd=HERE)
    if result.returncode != 0:
        sys.exit(f"ONNX Runtime failed on {model}:\n{result.stderr}")
    out = json.loads(result.stdout)
    assert out["inputs"] == ["pixel_values"] and out["outputs"] == ["logits"], out
    return np.array(out["logits"], dtype=np.float64)


def check_file(path, labels, failures):
    """python3-onnx: the checker with shape inference, opset 17, the names, the metadata."""
    import onnx
    model = onnx.load(path)  # external data is read from beside the file
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    opset = {o.domain: o.version for o in model.opset_import}
    ops = sorted({n.op_type for n in model.graph.node})
    print(f"  {os.path.basename(path)}: opset {opset}, ops {' '.join(ops)}")
    if opset.get("", None) != 17:
        failures.append(f"{path}: opset {opset}")
    id2label = json.loads(meta.get("id2label", "{}"))
    if [id2label[str(i)] for i in range(len(id2label))] != labels:
        failures.append(f"{path}: id2label {id2label} != {labels}")
    if "preprocessor_config" not in meta or "source" not in meta:
        failures.append(f"{path}: metadata {sorted(meta)}")
    allowed = {"Conv", "Reshape", "Transpose", "Add", "Mul", "Div", "MatMul", "Softmax", "LayerNormalization", "Erf",
               "Shape", "Concat", "Expand", "Gather", "Identity", "Slice", "ReduceMean", "Split", "Sigmoid"}
    if not set(ops) <= allowed:
        failures.append(f"{path}: unexpected operators {set(ops) - allowed}")


def compare(name, model_dir, onnx_path, pixels_of, images, root, failures, predict_options=()):
    records = [json.loads(l) for l in pg.predict(model_dir, images, *predict_options).splitlines()]
    ours = np.array([r["logits"] for r in records], dtype=np.float64)
    pixels = pixels_of(images)
    for batch in (1, 5):
        got = np.concatenate([ort_logits(onnx_path, pixels[i:i + batch], root) for i in range(0, len(images), batch)])
        worst = float(np.abs(got - ours).max())
        print(f"{name}: batch {batch}, {len(images)} images at {pixels.shape[-1]} px: "
              f"max |ONNX Runtime - vitpipe predict| {worst:.2e} (logits up to {np.abs(ours).max():.2f})")
        if not worst <= TOLERANCE:
            failures.append(f"{name}: batch {batch}: logits differ by {worst:.2e}")


def vit_pixels(directory, size=None):
    processor = hf_vit.ImageProcessor.from_file(os.path.join(directory, "preprocessor_config.json"))
    override = {"height": size, "width": size} if size else None
    return lambda paths: np.stack([processor.preprocess(hf_vit.load_image(p), override) for p in paths])


def family_pixels(directory):
    processor = hf_families.Processor.from_file(os.path.join(directory, "preprocessor_config.json"))
    return lambda paths: np.stack([processor.preprocess(hf_vit.load_image(p)) for p in paths])


def export(source, out, *options):
    result = vitpipe("export", source, "--format", "onnx", "--out", out, *options)
    if result.returncode != 0:
        sys.exit(f"vitpipe export {source} --format onnx failed:\n{result.stderr}")


def run_case(name, root):
    failures = []
    images = pg.make_images(os.path.join(root, "images"))[:5]
    onnx_path = os.path.join(root, "model.onnx")
    if name in ("vit", "vit-external-data", "vit-other-size"):
        config = pg.config_json(hidden=32, layers=2, heads=2, mlp=64, image=32, patch=8, labels=pg.CHESTXRAY14[:3])
        directory = pg.write_model(os.path.join(root, "vit"), config, pg.state_dict(config, 41),
                                   pg.preprocessor_json(32))
        labels = pg.CHESTXRAY14[:3]
        if name == "vit-other-size":  # trained at 32 px, run at 48: positions resized bicubically at export
            export(directory, onnx_path, "--image-size", 48)
            compare(name, directory, onnx_path, vit_pixels(directory, 48), images, root, failures,
                    ("--image-size", 48))
        else:
            export(directory, onnx_path, *(["--external-data"] if name == "vit-external-data" else []))
            if name == "vit-external-data" and not os.path.getsize(onnx_path + ".data") > 50000:
                failures.append("vit-external-data: no weights in model.onnx.data")
            compare(name, directory, onnx_path, vit_pixels(directory), images, root, failures)
    elif name in pf.CASES:
        config, seed, preprocessor = pf.CASES[name]
        directory = pg.write_model(os.path.join(root, name), config, pf.family_state_dict(config, seed), preprocessor)
        labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
        export(directory, onnx_path)
        compare(name, directory, onnx_path, family_pixels(directory), images, root, failures)
    elif name == "train-export-onnx":
        # `vitpipe train --export-onnx` writes OUTPUT/model.onnx beside OUTPUT/model.
        sys.path.insert(0, os.path.join(HERE, "..", "train_e2e"))
        import e2e_common as e2e
        csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 16, "val": 8}, seed=2)
        init = os.path.join(root, "init")
        e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "1", "--out", init)
        out = os.path.join(root, "run")
        e2e.run(*e2e.train_args(init, "csv:" + csv, out, "--epochs", "1", "--batch-size", "8", "--export-onnx"))
        onnx_path = os.path.join(out, "model.onnx")
        labels = list(e2e.BLOB_LABELS)
        model_dir = os.path.join(out, "model")
        compare(name, model_dir, onnx_path, vit_pixels(model_dir), images, root, failures)
    elif name == "lora-adapter":
        base_dir, _, base_w = pp.make_base(root, ["Effusion", "Nodule"])
        adapter = os.path.join(root, "adapter")
        pp.make_adapter(adapter, pp.base_config(target_modules=["query", "value", "dense"],
                                                base_model_name_or_path=base_dir), base_w, 7)
        labels = ["Effusion", "Nodule"]
        export(adapter, onnx_path)
        compare(name, adapter, onnx_path, vit_pixels(base_dir), images, root, failures)
    else:
        sys.exit(f"unknown case {name}")
    check_file(onnx_path, labels, failures)
    return failures


def refusals(root):
    """Bad requests: one line, a non-zero exit, and no file written."""
    failures = []
    config = pg.config_json(hidden=32, layers=1, heads=2, mlp=64, image=32, patch=8, labels=["a", "b"])
    directory = pg.write_model(os.path.join(root, "vit"), config, pg.state_dict(config, 3), pg.preprocessor_json(32))
    out = os.path.join(root, "bad.onnx")
    backbone = pg.write_model(os.path.join(root, "backbone"), {k: v for k, v in config.items()
                                                               if k not in ("id2label", "label2id")},
                              pg.state_dict(config, 3, classifier=False, prefix=""), pg.preprocessor_json(32))
    cases = [(["--format", "tflite"], "--format"), (["--format", "hf", "--image-size", "48"], "--image-size"),
             (["--format", "onnx", "--image-size", "44"], "44")]
    for options, expected in cases:
        result = vitpipe("export", directory, "--out", out, *options)
        lines = [l for l in result.stderr.splitlines() if l.startswith("error")]
        print(f"export {' '.join(options)}: exit {result.returncode}: {result.stderr.strip()}")
        if result.returncode == 0 or len(lines) != 1 or expected not in lines[0] or os.path.exists(out):
            failures.append(f"refusals: {options}: exit {result.returncode}, {result.stderr!r}")
    result = vitpipe("export", backbone, "--format", "onnx", "--out", out)
    print(f"export of a backbone: exit {result.returncode}: {result.stderr.strip()}")
    if result.returncode == 0 or os.path.exists(out):
        failures.append(f"refusals: a backbone without labels must be refused: {result.stderr!r}")
    leftovers = [f for f in os.listdir(root) if ".tmp-" in f]
    if leftovers:
        failures.append(f"refusals: temporary files left: {leftovers}")
    return failures


if __name__ == "__main__":
    pp.run_main("vitpipe-onnx-", run_case, refusals)
