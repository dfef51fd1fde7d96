"""The training report, checked two ways. Numbers: after a short training with --test on a generated four-label task,
report.html's embedded data (<script id="report-data">) equals scikit-learn on the saved predictions
(roc_auc_score, average_precision_score, roc_curve for val's Youden point; test is scored at val's thresholds),
numpy for the 90%-sensitivity point and
the expected calibration error (10 equal-width bins), and `vitpipe eval --json` on the exported model.
A real browser: headless Chromium opens the report with every network request sent to a dead proxy, and the test
fails on any console message (a script error), on any reference to a file or URL outside the page, on a chart without data (every
<svg class="chart"> has a series with data-points > 0 or says data-empty), on a missing section; it saves a
screenshot and checks it is not blank. Bad input: a directory without metrics.jsonl, a predictions CSV without its
probability columns: one clear line each, exit code 1."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

checks = e2e.Checks()
root = e2e.temp_dir("report")
data = "csv:" + e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 192, "val": 48, "test": 64}, seed=5)
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "3", "--out", init)
run = os.path.join(root, "run")
e2e.run(*e2e.train_args(init, data, run, "--epochs", "3", "--batch-size", "32", "--lr", "1e-3", "--test"))
html_path = os.path.join(run, "report.html")
checks.check(os.path.isfile(html_path), "train writes report.html")
html = open(html_path).read()
report = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1))


def close(a, b, tol=1e-9):
    return a is not None and b is not None and abs(a - b) <= tol * max(1.0, abs(b))


def ece(p, y):
    bins = np.minimum((p * 10).astype(int), 9)
    total = 0.0
    for b in range(10):
        m = bins == b
        if m.any():
            total += abs(p[m].mean() - y[m].mean()) * m.sum()
    return total / len(p)


for split in ("val", "test"):
    rows = e2e.read_csv_rows(os.path.join(run, f"predictions-{split}.csv"))
    s = report["splits"][split]
    checks.check(s["rows"] == len(rows), f"{split}: the report counts the predictions' rows", f"{s['rows']}")
    all_p, all_y = [], []
    for label in e2e.BLOB_LABELS:
        known = [r for r in rows if r["true:" + label] != ""]
        y = np.array([int(r["true:" + label]) for r in known])
        p = np.array([float(r["probability:" + label]) for r in known])
        all_p.append(p), all_y.append(y)
        detail = s["per_label"][label]
        if 0 < y.sum() < len(y):
            auc, ap = roc_auc_score(y, p), average_precision_score(y, p)
            checks.check(close(s["auc"][label], auc), f"{split} {label}: ROC-AUC = sklearn", f"{s['auc'][label]} vs {auc}")
            checks.check(close(s["pr_auc"][label], ap), f"{split} {label}: PR-AUC = sklearn average_precision",
                         f"{s['pr_auc'][label]} vs {ap}")
            youden = detail["youden"]
            t = youden["threshold"]
            sens, spec = (p[y == 1] >= t).mean(), (p[y == 0] < t).mean()
            checks.check(close(youden["sensitivity"], sens) and close(youden["specificity"], spec),
                         f"{split} {label}: the Youden point's sensitivity and specificity at its threshold")
            s90 = detail["sensitivity_90"]
            if split == "val":  # chosen here
                fpr, tpr, _ = roc_curve(y, p, drop_intermediate=False)
                checks.check(close(sens + spec - 1, float(np.max(tpr - fpr))),
                             f"{split} {label}: the Youden point is sklearn's maximum of TPR - FPR",
                             f"J {sens + spec - 1:.4f} vs {np.max(tpr - fpr):.4f}")
                candidates = [v for v in np.unique(p) if (p[y == 1] >= v).mean() >= 0.9]
                checks.check(close(s90["threshold"], max(candidates)), f"{split} {label}: the 90%-sensitivity point "
                             "is the highest threshold reaching 90%", f"{s90['threshold']} vs {max(candidates)}")
            else:  # test: val's thresholds applied unchanged, never tuned on test
                chosen = report["splits"]["val"]["per_label"][label]
                checks.check(t == chosen["youden"]["threshold"] and
                             s90["threshold"] == chosen["sensitivity_90"]["threshold"],
                             f"{split} {label}: the operating points use val's thresholds", f"{t}")
            checks.check(close(s90["sensitivity"], (p[y == 1] >= s90["threshold"]).mean()),
                         f"{split} {label}: the 90%-sensitivity point's sensitivity at its threshold")
        checks.check(close(detail["ece"], ece(p, y)), f"{split} {label}: ECE = numpy's (10 equal-width bins)",
                     f"{detail['ece']} vs {ece(p, y)}")
    pooled = ece(np.concatenate(all_p), np.concatenate(all_y))
    checks.check(close(s["ece"], pooled), f"{split}: ECE over all findings", f"{s['ece']} vs {pooled}")

evaluation = json.loads(e2e.run("eval", "--model", os.path.join(run, "model"), "--data", data, "--split", "test",
                                "--json", "--threads", "2").stdout)
for label in e2e.BLOB_LABELS:
    a, b = report["splits"]["test"]["auc"][label], evaluation["auc"][label]
    checks.check(close(a, b, 1e-6), f"test {label}: the report's ROC-AUC = vitpipe eval --json", f"{a} vs {b}")

# `vitpipe report --predictions` on the saved CSV alone.
alone = os.path.join(root, "alone.html")
e2e.run("report", "--predictions", os.path.join(run, "predictions-test.csv"), "--out", alone)
alone_data = json.loads(re.search(r'id="report-data">(.*?)</script>', open(alone).read(), re.S).group(1))
split_name = next(iter(alone_data["splits"]))
checks.check(all(close(alone_data["splits"][split_name]["auc"][label], report["splits"]["test"]["auc"][label])
                 for label in e2e.BLOB_LABELS), "report --predictions: the same AUCs as the run's report")

# Subgroups: the saved test predictions given a sex, an age and a view per image (the blob task has none), through
# `vitpipe report --predictions`: each subgroup's AUC is roc_auc_score on its rows, impossible ages are left out and
# counted, and the page gets a subgroup section with a forest plot per finding (checked in the browser below).
with open(os.path.join(run, "predictions-test.csv")) as f:
    reader = csv.DictReader(f)
    fields, saved = reader.fieldnames, list(reader)
ages = ["25", "45", "65", "85", "412", ""]
for i, r in enumerate(saved):
    r["sex"], r["age"], r["view"] = ("F" if i % 2 else "M"), ages[i % 6], ("AP" if i % 3 == 0 else "PA")
with_groups = os.path.join(root, "subgroups.csv")
with open(with_groups, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(saved)
subgroup_html = os.path.join(root, "subgroups.html")
e2e.run("report", "--predictions", with_groups, "--out", subgroup_html)
sub = json.loads(re.search(r'id="report-data">(.*?)</script>', open(subgroup_html).read(), re.S).group(1))
band = {"25": "<40", "45": "40-59", "65": "60-79", "85": "80+"}
group_of = {"sex": lambda i, r: r["sex"], "age": lambda i, r: band.get(r["age"], ""), "view": lambda i, r: r["view"]}
worst, compared = 0.0, 0
for g in sub.get("subgroups", {}).get("groups", []):
    member = [r for i, r in enumerate(saved) if group_of[g["attribute"]](i, r) == g["group"]]
    for label in e2e.BLOB_LABELS:
        y = np.array([int(r["true:" + label]) for r in member])
        p = np.array([float(r["logit:" + label]) for r in member])
        if 0 < y.sum() < len(y):
            worst, compared = max(worst, abs(g["roc_auc"][label]["value"] - roc_auc_score(y, p))), compared + 1
checks.check(compared == 8 * len(e2e.BLOB_LABELS) and worst < 1e-9,
             "report: each subgroup's ROC-AUC = sklearn on its rows (2 sexes, 4 age bands, 2 views)",
             f"{compared} compared, max difference {worst:.2e}")
left_out = sub.get("subgroups", {}).get("left_out", {}).get("age", {})
checks.check(left_out.get("impossible age (> 120 years)") == sum(r["age"] == "412" for r in saved) and
             left_out.get("unknown") == sum(r["age"] == "" for r in saved), "report: impossible and unknown ages "
             "left out and counted", f"{left_out}")

# Localization (issue 44): whole-image boxes (a pointing-game hit by construction; IoBB is 1 too unless the map is
# constant, which detects no region) on 4 test images,
# through eval --boxes --save-localization RUN/localization-test.json and the rebuilt report (in the browser below).
boxes_csv = os.path.join(root, "boxes.csv")
with open(boxes_csv, "w") as f:
    f.write("image,finding,x,y,w,h\n")
    for i in range(4):
        f.write(f"test_{i:04d}.png,{e2e.BLOB_LABELS[i % 2]},0,0,32,32\n")
localization_file = os.path.join(run, "localization-test.json")
e2e.run("eval", "--model", os.path.join(run, "model"), "--data", data, "--split", "test", "--threads", "1",
        "--boxes", boxes_csv, "--bootstrap", "20", "--save-localization", localization_file)
localization = json.load(open(localization_file))
whole = [f for f in localization["per_finding"].values()]
checks.check(localization["boxes"] == 4 and len(whole) == 2 and
             all(f["pointing_game"]["value"] == 1.0 for f in whole),
             "whole-image boxes: pointing game 1 per finding", f"{localization['per_finding']}")
localization_html = os.path.join(root, "localization.html")
e2e.run("report", run, "--out", localization_html)

# A real browser, offline.
browser = shutil.which("chromium") or shutil.which("chromium-browser")
if not browser:
    print("SKIP  headless Chromium checks: chromium is not installed (scripts/setup.sh --tests installs it)")
    e2e.cleanup(root)
    checks.finish()
    sys.exit(77 if not checks.failures else 1)
profile = os.path.join(root, "chromium-profile")
common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
          "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
          "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0", "--window-size=1280,4000"]
url = "file://" + html_path
dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
checks.check(dom.returncode == 0 and "</html>" in dom.stdout, "chromium renders the report", dom.stderr[-300:])
checks.check(not console, "no console message in the browser (no script error)", "; ".join(console)[:300])
# Nothing to fetch: Chromium does not log a failed image load to the console, so the page itself is read for any
# reference that is not inline (data: URLs and #fragments are).
external = re.findall(r'(?:src|href)\s*=\s*"(?!data:|#)([^"]*)"', html) + re.findall(r'url\((?!\s*["\']?(?:data:|#))', html)
checks.check(not external, "the report references nothing outside itself (scripts, styles, images inline)",
             f"{external[:3]}")
for section in ("configuration", "data", "training", "validation", "evaluation", "localization", "heatmaps"):
    checks.check(f'id="{section}"' in dom.stdout, f"the rendered page has its {section} section")
charts = re.findall(r'<svg class="chart"[^>]*>.*?</svg>', dom.stdout, re.S)
checks.check(len(charts) >= 3 + 2 * len(e2e.BLOB_LABELS) + 2, "the page has its charts (loss, LR, AUC, ROC, PR, "
             "calibration)", f"{len(charts)}")
empty = [c[:80] for c in charts if 'data-empty=' not in c.split(">", 1)[0] and
         not any(int(n) > 0 for n in re.findall(r'data-points="(\d+)"', c))]
checks.check(not empty, "every chart has data or says why not (data-empty)", f"{empty[:2]}")
sub_dom = subprocess.run(common + ["--dump-dom", "file://" + subgroup_html], capture_output=True, text=True,
                         timeout=120)
forests = re.findall(r'<svg class="chart forest"[^>]*data-rows="(\d+)"[^>]*>(.*?)</svg>', sub_dom.stdout, re.S)
checks.check('id="subgroups"' in sub_dom.stdout and not [l for l in sub_dom.stderr.splitlines() if "CONSOLE" in l],
             "the rendered subgroup page has its subgroups section, without console messages")
checks.check(len(forests) == len(e2e.BLOB_LABELS) and
             all(int(n) == 9 and body.count('class="estimate"') >= 1 for n, body in forests),
             "a forest plot per finding: all images and 8 subgroups, with estimates drawn", f"{len(forests)}")
checks.check('id="localization-not-evaluated"' in dom.stdout, "train's report: localization not evaluated")
loc_dom = subprocess.run(common + ["--dump-dom", "file://" + localization_html], capture_output=True, text=True,
                         timeout=120)
loc_external = re.findall(r'(?:src|href)\s*=\s*"(?!data:|#)([^"]*)"', open(localization_html).read())
checks.check('id="localization-table"' in loc_dom.stdout and not loc_external and
             not [line for line in loc_dom.stderr.splitlines() if "CONSOLE" in line] and
             len(re.findall(r'<img [^>]*src="data:image/png;base64,',
                            loc_dom.stdout.split('id="localization-images"')[-1])) >= 4, "the rendered report with boxes: its localization table and the 4 boxed images inline, offline")
images = re.findall(r'<img [^>]*src="data:image/png;base64,', dom.stdout)
checks.check(len(images) >= 1, "the heatmaps are inlined as data URLs", f"{len(images)}")
shot = os.path.join(root, "report.png")
subprocess.run(common + [f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
if checks.check(os.path.isfile(shot), "chromium saves a screenshot"):
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    checks.check(pixels.std() > 5, "the screenshot is not blank", f"std {pixels.std():.1f}")
    kept = os.environ.get("VITPIPE_REPORT_SCREENSHOT")
    if kept:
        shutil.copy(shot, kept)

# Bad input.
empty_dir = os.path.join(root, "not-a-run")
os.makedirs(empty_dir)
bad = e2e.run("report", empty_dir, expect_ok=False)
checks.check(bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "metrics.jsonl" in bad.stderr,
             "report on a directory without metrics.jsonl: one line naming it, exit 1", bad.stderr.strip()[:200])
broken = os.path.join(root, "broken.csv")
with open(os.path.join(run, "predictions-test.csv")) as f, open(broken, "w") as g:
    for line in f:
        g.write(",".join(line.rstrip("\n").split(",")[:5 + len(e2e.BLOB_LABELS)]) + "\n")  # image .. age, true:*
bad = e2e.run("report", "--predictions", broken, expect_ok=False)
checks.check(bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "broken.csv" in bad.stderr,
             "report on a predictions CSV without probability columns: one line naming the file, exit 1",
             bad.stderr.strip()[:200])

e2e.cleanup(root)
checks.finish()
