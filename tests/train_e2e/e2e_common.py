"""Shared pieces of the end-to-end checks of `vitpipe train / eval / export / predict`: running the binary, an
independent safetensors reader (JSON header + numpy), a generated learnable multi-label image task, a plain-torch
ViTForImageClassification forward for exported models, and a collector of failed checks."""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

VITPIPE = os.environ.get("VITPIPE", "vitpipe")
SOURCE_DIR = os.environ.get("VITPIPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


# --- running the binary ---

def run(*args, expect_ok=True, env=None):
    """Runs `vitpipe ARGS`; stdout and stderr captured (so stderr is not a terminal). Exits the script if a run that
    should succeed fails."""
    command = [VITPIPE, *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if expect_ok and result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(command)} exited {result.returncode}:\n{result.stderr[-4000:]}")
    return result


def train_args(model, data, out, *extra):
    """`vitpipe train` with one loader thread and --threads 2 unless `extra` names another count."""
    threads = [] if "--threads" in extra else ["--threads", "2"]
    return ["train", "--model", model, "--data", data, "--output-dir", out, "--loader-threads", "1", *threads,
            *map(str, extra)]


def temp_dir(tag):
    path = tempfile.mkdtemp(prefix=f"vitpipe_e2e_{tag}_")
    return path


def cleanup(path):
    if os.environ.get("VITPIPE_KEEP_TEMP"):
        print(f"kept {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


def read_metrics(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


# --- an independent safetensors reader ---

_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def read_safetensors(path):
    """name -> numpy array, plus the metadata dict. Checks the layout as the reference reader does."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors, spans = {}, []
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if entry["dtype"] == "BF16":
            raw = np.frombuffer(body[begin:end], dtype="<u2").astype(np.uint32) << 16
            array = raw.view(np.float32)
        else:
            array = np.frombuffer(body[begin:end], dtype=_DTYPES[entry["dtype"]])
        tensors[name] = array.reshape(entry["shape"])
        spans.append((begin, end))
    spans.sort()
    position = 0
    for begin, end in spans:
        assert begin == position, f"{path}: gap or overlap at byte {begin}"
        position = end
    assert position == len(body), f"{path}: {len(body) - position} trailing bytes"
    return tensors, metadata


def same_tensors(a, b):
    """(equal bit for bit, description of the first difference)."""
    if sorted(a) != sorted(b):
        return False, f"names differ: {sorted(set(a) ^ set(b))[:5]}"
    for name in sorted(a):
        if a[name].shape != b[name].shape or a[name].dtype != b[name].dtype:
            return False, f"{name}: shape/dtype {a[name].shape}/{a[name].dtype} vs {b[name].shape}/{b[name].dtype}"
        if a[name].tobytes() != b[name].tobytes():
            diff = np.max(np.abs(a[name].astype(np.float64) - b[name].astype(np.float64)))
            return False, f"{name}: values differ (max abs {diff:.3g})"
    return True, ""


def max_relative_difference(a, b):
    worst, where = 0.0, ""
    for name in a:
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        d = np.max(np.abs(x - y)) / max(1e-12, np.max(np.abs(x)))
        if d > worst:
            worst, where = d, name
    return worst, where


# --- a learnable multi-label task: coloured blobs ---

BLOB_LABELS = ["red", "green", "blue", "white"]


def make_blob_dataset(directory, counts, size=32, seed=0, relabelled_copies=0):
    """RGB PNGs of grey noise with up to four blobs at random places: a red, a green, a blue and a white one, each
    present with probability 1/2 independently; the labels say which are present. A vit-micro learns it to a
    validation mean ROC-AUC near 0.98 in a few hundred images. counts: {"train": n, "val": n, "test": n} (a split
    may be left out). `relabelled_copies` extra test rows reuse test images with fresh random labels, so equal
    scores meet different targets (ties in the ROC-AUC). Writes data.csv (path, split, one 0/1 column per label)
    and returns its path."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(directory, "images"), exist_ok=True)
    rows = []
    yy, xx = np.mgrid[0:size, 0:size]
    for split, count in counts.items():
        for i in range(count):
            labels = rng.integers(0, 2, size=4)
            image = rng.normal(100, 15, size=(size, size, 1)).repeat(3, axis=2)
            for k in range(4):
                if labels[k]:
                    cy, cx = rng.uniform(5, size - 5, size=2)
                    radius = rng.uniform(3, 5) * size / 32
                    blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * radius ** 2))
                    if k < 3:
                        image[:, :, k] += 140 * blob
                    else:
                        image += 120 * blob[:, :, None]
            name = f"images/{split}_{i:04d}.png"
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8), mode="RGB").save(os.path.join(directory, name))
            rows.append((name, split, labels))
    tests = [row for row in rows if row[1] == "test"]
    for i in range(relabelled_copies):
        rows.append((tests[i % len(tests)][0], "test", rng.integers(0, 2, size=4)))
    path = os.path.join(directory, "data.csv")
    with open(path, "w") as f:
        f.write("path,split," + ",".join(BLOB_LABELS) + "\n")
        for name, split, labels in rows:
            f.write(f"{name},{split}," + ",".join(str(int(v)) for v in labels) + "\n")
    return path


def read_csv_rows(path):
    import csv
    with open(path) as f:
        return list(csv.DictReader(f))


# --- a plain-torch ViTForImageClassification (Hugging Face's math) for exported directories ---

def torch_vit_logits(model_dir, images):
    """images: float64 [B, C, H, W] already preprocessed. Returns logits [B, labels] (float64)."""
    import torch
    import torch.nn.functional as F
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    p = {k: torch.from_numpy(v.astype(np.float64)) for k, v in read_safetensors(os.path.join(model_dir,
                                                                                              "model.safetensors"))[0].items()}
    d, heads, eps = c["hidden_size"], c["num_attention_heads"], c.get("layer_norm_eps", 1e-12)
    x = torch.from_numpy(images)
    x = F.conv2d(x, p["vit.embeddings.patch_embeddings.projection.weight"],
                 p["vit.embeddings.patch_embeddings.projection.bias"], stride=c["patch_size"])
    x = x.flatten(2).transpose(1, 2)
    x = torch.cat([p["vit.embeddings.cls_token"].expand(x.shape[0], -1, -1), x], dim=1)
    x = x + p["vit.embeddings.position_embeddings"]
    for layer in range(c["num_hidden_layers"]):
        pre = f"vit.encoder.layer.{layer}."
        lin = lambda t, name: F.linear(t, p[pre + name + ".weight"], p[pre + name + ".bias"])
        h = F.layer_norm(x, (d,), p[pre + "layernorm_before.weight"], p[pre + "layernorm_before.bias"], eps)
        b, n, _ = h.shape
        split = lambda t: t.view(b, n, heads, d // heads).transpose(1, 2)
        q = split(lin(h, "attention.attention.query"))
        k = split(lin(h, "attention.attention.key"))
        v = split(lin(h, "attention.attention.value"))
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // heads) ** 0.5, dim=-1) @ v
        x = x + lin(a.transpose(1, 2).reshape(b, n, d), "attention.output.dense")
        h = F.layer_norm(x, (d,), p[pre + "layernorm_after.weight"], p[pre + "layernorm_after.bias"], eps)
        x = x + lin(F.gelu(lin(h, "intermediate.dense")), "output.dense")
    x = F.layer_norm(x, (d,), p["vit.layernorm.weight"], p["vit.layernorm.bias"], eps)
    return F.linear(x[:, 0], p["classifier.weight"], p["classifier.bias"]).numpy()


def preprocess_png(path, preprocessor):
    """ViTImageProcessor for an image already at the model's size (no resize): RGB, /255, normalise."""
    from PIL import Image
    image = Image.open(path).convert("RGB")
    size = preprocessor["size"]
    height = size["height"] if isinstance(size, dict) else size
    assert image.size == (height, height), f"{path}: expected {height}x{height} (this helper does not resize)"
    x = np.asarray(image, dtype=np.float64) * preprocessor.get("rescale_factor", 1 / 255)
    x = (x - np.array(preprocessor["image_mean"])) / np.array(preprocessor["image_std"])
    return x.transpose(2, 0, 1)


# --- collecting failures ---

class Checks:
    """Each check prints one line; the script exits non-zero at the end if any failed."""

    def __init__(self):
        self.failures = []

    def check(self, ok, what, detail=""):
        print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail else ""), flush=True)
        if not ok:
            self.failures.append(what)
        return ok

    def finish(self):
        if self.failures:
            print(f"{len(self.failures)} check(s) failed:\n  " + "\n  ".join(self.failures))
            sys.exit(1)
        print("all checks passed")


def rank_pids(mpirun_pid):
    """rank -> pid of mpirun's children (the ranks on this node)."""
    pids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != mpirun_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                for variable in f.read().split(b"\0"):
                    if variable.startswith(b"OMPI_COMM_WORLD_RANK="):
                        pids[int(variable.split(b"=")[1])] = int(entry)
        except (OSError, IndexError, ValueError):
            continue
    return pids
