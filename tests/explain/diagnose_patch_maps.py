"""Diagnostics behind explain.finds_the_patch (not a test; the README quotes its figures): generates the bright-square
task (--lo/--hi: the square's pixel rows and columns), trains a vit-micro with the test's recipe on the true labels
or on shuffled ones (--shuffle permute: a plain permutation of train+val labels; balanced: half of the square images
and half of the others positive), or takes the untrained init (--init-only), then measures in float64 PyTorch (the
exported checkpoint through tests/model/reference_families.py): the model's logits on images with and without the
square, ROC-AUC against the square and against its training labels, per layer and head the class token's attention
on the square, and the share inside the square of rollout (head fusion mean/max/min, discard ratio 0/0.5/0.9 over
the whole matrix as vit-explain, or per row as vitpipe), grad-rollout and Grad-CAM on 12 positive test images.

usage: VITPIPE=build/vitpipe diagnose_patch_maps.py --root DIR [--lo 8 --hi 16] [--shuffle balanced] [--init-only]
"""
import argparse, json, os, sys, subprocess, time
import numpy as np, torch
from PIL import Image
from sklearn.metrics import roc_auc_score
T = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, T + "/explain"); sys.path.insert(0, T + "/predict"); sys.path.insert(0, T + "/train_e2e")
import explain_families as ef, hf_families, hf_vit
VITPIPE = os.environ.get("VITPIPE", "vitpipe")

ap = argparse.ArgumentParser()
ap.add_argument("--root", required=True)
ap.add_argument("--lo", type=int, default=4); ap.add_argument("--hi", type=int, default=20)
ap.add_argument("--shuffle", default="none", choices=["none", "permute", "balanced"])
ap.add_argument("--epochs", type=int, default=6); ap.add_argument("--lr", default="2e-3")
ap.add_argument("--extra", default=""); ap.add_argument("--ntrain", type=int, default=320)
ap.add_argument("--seed", type=int, default=0); ap.add_argument("--init-only", action="store_true")
ap.add_argument("--patch", type=int, default=4)
a = ap.parse_args()
SIZE = 32; P = a.patch; G = SIZE // P
rng = np.random.default_rng(a.seed)
os.makedirs(a.root + "/images", exist_ok=True)
rows = []
for split, count in (("train", a.ntrain), ("val", 40), ("test", 80)):
    for i in range(count):
        pos = int(rng.integers(0, 2))
        img = rng.normal(90, 25, size=(SIZE, SIZE))
        if pos: img[a.lo:a.hi, a.lo:a.hi] += 110
        name = f"images/{split}_{i:04d}.png"
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), mode="L").convert("RGB").save(a.root + "/" + name)
        rows.append([name, split, pos, pos])
if a.shuffle == "permute":
    idx = [i for i, r in enumerate(rows) if r[1] != "test"]
    labels = [rows[i][2] for i in idx]; rng.shuffle(labels)
    for i, v in zip(idx, labels): rows[i][3] = v
elif a.shuffle == "balanced":
    for split in ("train", "val"):
        for sq in (0, 1):
            idx = [i for i, r in enumerate(rows) if r[1] == split and r[2] == sq]
            lab = np.array([1] * (len(idx) // 2) + [0] * (len(idx) - len(idx) // 2)); rng.shuffle(lab)
            for i, v in zip(idx, lab): rows[i][3] = int(v)
with open(a.root + "/data.csv", "w") as f:
    f.write("path,split,square\n")
    for r in rows: f.write(f"{r[0]},{r[1]},{r[3]}\n")
def run(*args):
    t = time.time(); r = subprocess.run([VITPIPE, *map(str, args)], capture_output=True, text=True)
    if r.returncode: sys.exit(r.stderr[-3000:])
    return r, time.time() - t
init = a.root + "/init"
if not os.path.exists(init):
    run("init", "--preset", "vit-micro", "--patch-size", P, "--labels", "square", "--seed", "1", "--out", init)
model = init
if a.init_only: pass
elif os.path.exists(a.root + '/run/model/config.json'): model = a.root + '/run/model'
else:
    out = a.root + "/run"
    _, dt = run("train", "--model", init, "--data", "csv:" + a.root + "/data.csv", "--output-dir", out, "--loader-threads", "1",
        "--threads", "2", "--epochs", a.epochs, "--batch-size", 32, "--lr", a.lr, "--warmup-ratio", "0.1", "--seed", 0, *a.extra.split())
    print(f"train {dt:.1f}s")
    model = out + "/model"
    for line in open(out + "/metrics.jsonl"):
        j = json.loads(line)
        if "val" in json.dumps(j)[:200] and "auc" in line.lower(): print("  ", line.strip()[:200])
params, cfg, j = hf_families.load_pretrained(model, torch.float64)
cfg["teacher"] = False
proc = hf_vit.ImageProcessor.from_file(model + "/preprocessor_config.json")
def pix(path): return torch.from_numpy(proc.preprocess(hf_vit.load_image(path))[None]).double()
def logit(path): return hf_families.logits(params, cfg, pix(path))[0, 0].item()
for split in ("train", "test"):
    sel = [r for r in rows if r[1] == split]
    z = [logit(a.root + "/" + r[0]) for r in sel]
    lab = np.array([r[2] for r in sel]); zz = np.array(z); pp = 1/(1+np.exp(-zz))
    print(f"{split}: logit mean square {zz[lab==1].mean():.3f} plain {zz[lab==0].mean():.3f} std within {np.concatenate([zz[lab==1]-zz[lab==1].mean(), zz[lab==0]-zz[lab==0].mean()]).std():.4f}; prob diff {pp[lab==1].mean()-pp[lab==0].mean():.4f}")
    print(f"{split}: AUC vs true square {roc_auc_score([r[2] for r in sel], z):.3f}; vs training labels {roc_auc_score([r[3] for r in sel], z):.3f}")
mask = torch.zeros(G, G, dtype=torch.bool)
c0, c1 = a.lo // P, (a.hi - 1) // P + 1
mask[c0:c1, c0:c1] = True; mask = mask.flatten()
print(f"square cells {c0}..{c1-1}: {mask.sum().item()} of {G*G} ({mask.float().mean().item():.3f})")
def inside(m): m = m.clamp(min=0); s = m.sum().item(); return m[mask].sum().item() / s if s > 0 else 0.0
def rollout(probs, fusion, discard, per_row, r, eye, patches):
    v = r.clone()
    for A in reversed(probs):
        A = A[0].detach()
        F_ = {"mean": A.mean(0), "max": A.max(0)[0], "min": A.min(0)[0]}[fusion].clone()
        if discard > 0:
            if per_row:
                k = int(F_.shape[1] * discard)
                idx = F_.topk(k, -1, largest=False)[1]
                keep0 = F_[:, 0].clone()
                F_.scatter_(1, idx, 0.0); F_[:, 0] = keep0
            else:
                flat = F_.view(-1); k = int(flat.numel() * discard)
                idx = flat.topk(k, largest=False)[1]; idx = idx[idx != 0]; flat[idx] = 0
        M = (F_ + eye) / 2
        M = M / M.sum(-1, keepdim=True)
        v = v @ M
    return v[-patches:]
tests = [r for r in rows if r[1] == "test" and r[2] == 1][:12]
res = {}
layers = cfg["layers"]; heads = cfg["heads"]
clsatt = np.zeros((layers, heads)); selfdiag = np.zeros(layers)
for r_ in tests:
    p_ = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    logits, probs, ln1 = ef.capture_forward(p_, cfg, pix(a.root + "/" + r_[0]))
    logits[0, 0].backward()
    tokens = probs[0].shape[-1]; patches = G * G
    rvec = ef.readout(cfg, tokens, patches); eye = torch.eye(tokens, dtype=torch.float64)
    for l, A in enumerate(probs):
        A = A[0].detach()
        for h in range(heads): clsatt[l, h] += A[h, 0, 1:][mask].sum().item() / len(tests)
        selfdiag[l] += A.mean(0).diagonal().mean().item() / len(tests)
    for fusion in ("mean", "max", "min"):
        for discard in (0.0, 0.5, 0.9):
            for per_row in ((False, True) if discard else (False,)):
                key = f"rollout {fusion} d{discard}{' row' if per_row else ''}"
                res.setdefault(key, []).append(inside(rollout(probs, fusion, discard, per_row, rvec, eye, patches)))
    v = rvec.clone()
    for A in reversed(probs): v = v @ (eye + (A.grad[0] * A[0]).clamp(min=0).mean(0).detach())
    res.setdefault("grad-rollout", []).append(inside(v[-patches:]))
    x, g = ln1[0, -patches:].detach(), ln1.grad[0, -patches:]
    res.setdefault("gradcam", []).append(inside((x @ g.mean(0)).clamp(min=0)))
    res.setdefault("gradcam-noclamp-pos", []).append(inside((x @ g.mean(0))))
    res.setdefault("|gradcam| (abs)", []).append(inside((x @ g.mean(0)).abs()))
    res.setdefault("hirescam (sum x*g)^+", []).append(inside((x * g).sum(-1).clamp(min=0)))
for k, v in res.items(): print(f"  {k:28s} {np.mean(v):.3f}  (min {np.min(v):.3f})")
print("cls->square attention per layer/head:\n", np.round(clsatt, 3))
print("mean diagonal (self) attention per layer:", np.round(selfdiag, 3))
