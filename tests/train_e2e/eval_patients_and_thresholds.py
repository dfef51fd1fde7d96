"""Honest test numbers on the bundled ChestX-ray14 sample (its test split: 310 images of 15 patients). After a short
training with --test: train writes thresholds.json (per finding the Youden and 90%-sensitivity thresholds chosen on
val, the model step); the report's test operating points are those val thresholds applied to the test predictions
(numpy here), and `eval --thresholds` gives the same and says where they came from (optimistic when scored on val
itself). Intervals resample patients by default ("unit": "patient") and are wider than the image-level ones
(--bootstrap-unit image) here, where patients repeat: for most of the 14 findings, and by far on the sample's view
task (AP vs PA, which a small model learns). Bad input: --bootstrap-unit patient on data without patient
ids, an unknown unit, a thresholds file that is not one: one line each, exit 1."""

import json
import os
import re

import numpy as np

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("honest")
sample = os.path.join(e2e.SOURCE_DIR, "data", "chestxray14-sample")
data = "chestxray14:" + sample
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--seed", "4", "--out", init)
run = os.path.join(root, "run")
e2e.run(*e2e.train_args(init, data, run, "--max-steps", "12", "--batch-size", "32", "--lr", "1e-3", "--eval-every",
                        "12", "--test"))
model = os.path.join(run, "model")

# thresholds.json: chosen on val, for the exported weights.
path = os.path.join(run, "thresholds.json")
checks.check(os.path.isfile(path), "train writes thresholds.json")
thresholds = json.load(open(path))
final_step = max(r["step"] for r in e2e.read_metrics(run) if r["type"] == "final_eval")
checks.check(thresholds["chosen_on"] == "val" and thresholds["step"] == final_step and
             len(thresholds["findings"]) == 14, "thresholds.json: chosen on val, the model step, 14 findings",
             f"{thresholds['chosen_on']} step {thresholds['step']} ({final_step})")


def read_predictions(file):
    rows = e2e.read_csv_rows(file)
    names = [c[len("probability:"):] for c in rows[0] if c.startswith("probability:")]
    p = np.array([[float(r["probability:" + n]) for n in names] for r in rows])
    y = np.array([[int(r["true:" + n]) for n in names] for r in rows])
    return names, p, y


def rates(p, y, t):
    return (p[y == 1] >= t).mean(), (p[y == 0] < t).mean()


names, val_p, val_y = read_predictions(os.path.join(run, "predictions-val.csv"))
_, test_p, test_y = read_predictions(os.path.join(run, "predictions-test.csv"))
# Youden on val by numpy: the highest threshold maximising TPR - FPR.
for l, name in enumerate(names):
    t = thresholds["findings"][name]["youden"]
    p, y = val_p[:, l], val_y[:, l]
    if 0 < y.sum() < len(y):
        j = {v: (p[y == 1] >= v).mean() - (p[y == 0] >= v).mean() for v in np.unique(p)}
        checks.check(t == max(v for v in j if j[v] == max(j.values())), f"{name}: the val Youden threshold", f"{t}")
    else:
        checks.check(t is None, f"{name}: one class on val, no threshold")

# The report: test scored at val's thresholds, never its own.
html = open(os.path.join(run, "report.html")).read()
report = json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))
test = report["splits"]["test"]
checks.check(test["operating_points"]["chosen_on"] == "val" and not test["operating_points"]["optimistic"],
             "report: test operating points chosen on val", f"{test['operating_points']}")
checks.check(report["splits"]["val"]["operating_points"]["optimistic"], "report: val's own points are labelled "
             "optimistic")
worst, compared = 0.0, 0
for l, name in enumerate(names):
    t = thresholds["findings"][name]["youden"]
    point = test["per_label"][name]["youden"]
    if t is None or not 0 < test_y[:, l].sum() < len(test_y):
        continue
    sens, spec = rates(test_p[:, l], test_y[:, l], t)
    worst = max(worst, abs(point["threshold"] - t), abs(point["sensitivity"] - sens), abs(point["specificity"] - spec))
    compared += 1
checks.check(compared >= 5 and worst < 1e-12, "report: test operating points = val thresholds applied to test",
             f"{compared} findings, max difference {worst:.1e}")
checks.check(test["ci_unit"] == "patient", "report: test intervals resample patients", f"{test['ci_unit']}")

# eval: intervals by patient by default, wider than by image where patients repeat.
def evaluate(*extra):
    return json.loads(e2e.run("eval", "--model", model, "--data", data, "--json", "--threads", "2", *extra).stdout)


by_patient = evaluate("--split", "test", "--bootstrap", "1000")
by_image = evaluate("--split", "test", "--bootstrap", "1000", "--bootstrap-unit", "image")
detail = by_patient["detail"]["roc_auc"]
checks.check(by_patient["ci_unit"] == "patient" and by_image["ci_unit"] == "image" and
             all(v["ci"] is None or v["ci"]["unit"] == "patient" for v in detail["per_label"].values()),
             "eval: ci objects say their unit (patient by default, image when asked)")


def width(ci):
    return ci[1] - ci[0]


wider = [n for n in names if by_patient["auc_ci"][n] and width(by_patient["auc_ci"][n]) > width(by_image["auc_ci"][n])]
defined = [n for n in names if by_patient["auc_ci"][n]]
checks.check(len(wider) > len(defined) / 2, "eval: most findings' patient-level intervals are wider",
             f"{len(wider)} of {len(defined)}")
skipped = {n: v["ci"]["skipped"] for n, v in detail["per_label"].items() if v["ci"]}
checks.check(any(s > 0 for s in skipped.values()), "eval: one-class resamples are skipped and counted per finding",
             f"{skipped}")

# eval --thresholds: the val thresholds applied to test, and where they came from.
saved = os.path.join(root, "test.csv")
applied = evaluate("--split", "test", "--thresholds", path, "--save-predictions", saved)
source = applied["operating_points"]["source"]
checks.check(source["chosen_on"] == "val" and source["step"] == final_step and source["file"] == path and
             applied["operating_points"]["optimistic"] is False, "eval --thresholds: says where they came from",
             f"{source}")
_, saved_p, saved_y = read_predictions(saved)
worst = 0.0
for l, name in enumerate(names):
    for kind in ("youden", "sensitivity_90"):
        t = thresholds["findings"][name][kind]
        point = applied["operating_points"]["per_label"][name][kind]
        if t is None or not 0 < saved_y[:, l].sum() < len(saved_y):
            continue
        sens, spec = rates(saved_p[:, l], saved_y[:, l], t)
        worst = max(worst, abs(point["threshold"] - t), abs(point["sensitivity"] - sens),
                    abs(point["specificity"] - spec))
checks.check(worst < 1e-12, "eval --thresholds: test operating points = val thresholds applied to test",
             f"max difference {worst:.1e}")
on_val = evaluate("--split", "val", "--thresholds", path)
checks.check(on_val["operating_points"]["optimistic"] is True, "eval --thresholds on val itself: optimistic")
text = e2e.run("eval", "--model", model, "--data", data, "--split", "test", "--threads", "2", "--thresholds",
               path).stdout
checks.check("chosen on the val split" in text and "applied unchanged" in text, "eval: the text says where the "
             "thresholds came from")
checks.check(evaluate("--split", "test")["operating_points"] is None, "eval without --thresholds: no operating points")

# The sample's view task (AP vs PA, the demo's), which a small model learns: one finding, 15 test patients.
view_data = "csv:" + os.path.join(sample, "view_position.csv")
view_init = os.path.join(root, "view-init")
e2e.run("init", "--preset", "vit-micro", "--labels", "AP", "--seed", "0", "--out", view_init)
view_run = os.path.join(root, "view")
e2e.run(*e2e.train_args(view_init, view_data, view_run, "--max-steps", "60", "--batch-size", "32", "--lr", "1e-3",
                        "--eval-every", "60"))
view = {unit: json.loads(e2e.run("eval", "--model", os.path.join(view_run, "model"), "--data", view_data, "--split",
                                 "test", "--json", "--threads", "2", "--bootstrap", "2000", "--bootstrap-unit",
                                 unit).stdout) for unit in ("image", "patient")}
print(f"view task: test ROC-AUC {view['patient']['auc']['AP']:.4f}, 95% CI by image {view['image']['auc_ci']['AP']}, "
      f"by patient {view['patient']['auc_ci']['AP']}")
checks.check(width(view["patient"]["auc_ci"]["AP"]) > 1.5 * width(view["image"]["auc_ci"]["AP"]),
             "eval, view task: the patient-level interval is much wider than the image-level one",
             f"{width(view['patient']['auc_ci']['AP']):.3f} vs {width(view['image']['auc_ci']['AP']):.3f}")

# Bad input: one line, exit 1.
no_patients = os.path.join(root, "no_patients.csv")
with open(no_patients, "w") as f:
    f.write("path,split,Atelectasis\n")
    for i, image in enumerate(sorted(os.listdir(os.path.join(sample, "images")))[:8]):
        f.write(f"{os.path.join(sample, 'images', image)},test,{i % 2}\n")
not_json = os.path.join(root, "not.json")
open(not_json, "w").write("{")
for args, needle, what in [
        (["--data", "csv:" + no_patients, "--bootstrap", "10", "--bootstrap-unit", "patient"], "no patient ids",
         "--bootstrap-unit patient on data without patient ids"),
        (["--data", data, "--bootstrap-unit", "patients"], "--bootstrap-unit", "an unknown --bootstrap-unit"),
        (["--data", data, "--thresholds", not_json], "not.json", "--thresholds on a file that is not JSON")]:
    bad = e2e.run("eval", "--model", model, "--split", "test", *args, expect_ok=False)
    lines = bad.stderr.strip().splitlines()
    checks.check(bad.returncode == 1 and len(lines) == 1 and needle in lines[0], f"eval refuses {what}: one line",
                 bad.stderr.strip()[-300:])

e2e.cleanup(root)
checks.finish()
