"""`vitpipe eval --json` on the bundled ChestX-ray14 sample (real 64x64 images resized to a vit-micro's 32 px)
against scikit-learn: after a short training, the per-finding ROC-AUCs of the official test split equal
roc_auc_score on the scores eval ranked (`--save-predictions`; they equal `vitpipe predict`'s logits up to batch
rounding), with labels read from the sample's Data_Entry CSV here; "auc" lists all 14 findings, null exactly where the split has one class only (the validation
split of this sample lacks some findings), and "mean_auc" is the mean of the defined ones."""

import csv
import json
import os

import numpy as np
from sklearn.metrics import roc_auc_score

import e2e_common as e2e

FINDINGS = ["Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Effusion", "Emphysema", "Fibrosis", "Hernia",
            "Infiltration", "Mass", "Nodule", "Pleural_Thickening", "Pneumonia", "Pneumothorax"]

checks = e2e.Checks()
root = e2e.temp_dir("sklearn")
sample = os.path.join(e2e.SOURCE_DIR, "data", "chestxray14-sample")
data = "chestxray14:" + sample
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--seed", "4", "--out", init)
out = os.path.join(root, "run")
e2e.run(*e2e.train_args(init, data, out, "--max-steps", "12", "--batch-size", "32", "--lr", "1e-3", "--threads", "1",
                        "--eval-every", "12"))
model = os.path.join(out, "model")

with open(os.path.join(sample, "Data_Entry_2017_v2020.csv")) as f:
    findings_of = {row["Image Index"]: row["Finding Labels"].split("|") for row in csv.DictReader(f)}
test_images = [line.strip() for line in open(os.path.join(sample, "test_list.txt")) if line.strip()]
targets = np.array([[int(name in findings_of[image]) for name in FINDINGS] for image in test_images])

paths = [os.path.join(sample, "images", image) for image in test_images]
predictions = [json.loads(line) for line in e2e.run("predict", "--model", model, "--threads", "1", *paths).stdout
               .splitlines()]
checks.check(len(predictions) == len(paths), "predict: one line per test image", f"{len(predictions)}")
probabilities = np.array([[p["probabilities"][name] for name in FINDINGS] for p in predictions])

saved = os.path.join(root, "test-predictions.csv")
evaluation = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "test", "--json", "--threads",
                                "1", "--save-predictions", saved).stdout)
checks.check(evaluation["rows"] == len(test_images), "eval counts the test split's images", f"{evaluation['rows']}")
checks.check(list(evaluation["auc"]) == FINDINGS or sorted(evaluation["auc"]) == sorted(FINDINGS),
             "eval --json: \"auc\" has the 14 findings", f"{list(evaluation['auc'])}")
# The scores eval ranked: its logits, which equal predict's up to batch rounding (oneDNN may round a row differently
# by its position in a batch), with the labels read here from the Data_Entry CSV.
saved_rows = {os.path.basename(x["image"]): x for x in e2e.read_csv_rows(saved)}
checks.check(sorted(saved_rows) == sorted(test_images), "--save-predictions: a row per test image",
             f"{len(saved_rows)} rows")
rows = [saved_rows[image] for image in test_images]
saved_targets = np.array([[int(x["true:" + name]) for name in FINDINGS] for x in rows])
checks.check(np.array_equal(saved_targets, targets), "--save-predictions: labels equal the Data_Entry CSV's")
logits = np.array([[float(x["logit:" + name]) for name in FINDINGS] for x in rows])
predict_logits = np.array([p["logits"] for p in predictions])
difference = np.max(np.abs(logits - predict_logits))
checks.check(difference < 1e-4, "eval's logits equal predict's", f"max abs {difference:.2e}")
worst = 0.0
for l, name in enumerate(FINDINGS):
    if 0 < targets[:, l].sum() < len(targets):
        expected = roc_auc_score(targets[:, l], logits[:, l])
        worst = max(worst, abs(evaluation["auc"][name] - expected))
    else:
        checks.check(evaluation["auc"][name] is None, f"test: {name} has one class: null")
checks.check(worst < 1e-12, "eval --json test AUC = sklearn roc_auc_score on the scores eval ranked, per finding",
             f"max difference {worst:.2e}")
# Subgroups (sex, age band, view from the Data_Entry CSV): each subgroup's AUC is roc_auc_score on its rows.
with open(os.path.join(sample, "Data_Entry_2017_v2020.csv")) as f:
    entry = {row["Image Index"]: row for row in csv.DictReader(f)}


def band(age):
    return "" if age > 120 else "<40" if age < 40 else "40-59" if age < 60 else "60-79" if age < 80 else "80+"


attribute_of = {"sex": lambda e: e["Patient Gender"], "age": lambda e: band(int(e["Patient Age"])),
                "view": lambda e: e["View Position"]}
expected_groups = {(a, g(entry[i])) for a, g in attribute_of.items() for i in test_images if g(entry[i])}
listed = {(x["attribute"], x["group"]) for x in evaluation["subgroups"]}
checks.check(listed == expected_groups, "eval --json: \"subgroups\" lists every sex, age band and view of the split",
             f"{sorted(listed)}")
worst, compared, too_few = 0.0, 0, 0
for group in evaluation["subgroups"]:
    member = np.array([attribute_of[group["attribute"]](entry[i]) == group["group"] for i in test_images])
    checks.check(group["images"] == member.sum(), f"subgroup {group['attribute']}={group['group']}: image count")
    for l, name in enumerate(FINDINGS):
        t, s = targets[member, l], logits[member, l]
        value = group["roc_auc"][name]["value"]
        if 0 < t.sum() < len(t):
            worst = max(worst, abs(value - roc_auc_score(t, s)))
            compared += 1
        else:
            too_few += 1
            checks.check(value is None and group["roc_auc"][name]["too_few"], f"{group['group']} {name}: too few")
checks.check(compared > 20 and too_few > 0 and worst < 1e-9,
             "subgroup AUCs = sklearn roc_auc_score on each subgroup's rows; one-class subgroups listed as too few",
             f"{compared} compared, {too_few} too few, max difference {worst:.2e}")
# --subgroup COLUMN on a csv: dataset (the same test images, a made-up "site" column, not read as a label): each
# site's AUC is sklearn's on its rows; on a chestxray14: dataset the flag is refused in one line.
site_csv = os.path.join(root, "sites.csv")
site_of = {image: "A" if int(entry[image]["Patient ID"]) % 2 else "B" for image in test_images}
with open(site_csv, "w") as f:
    f.write("path,labels,patient,split,site\n")
    for image in test_images:
        f.write(f"{os.path.join(sample, 'images', image)},{entry[image]['Finding Labels']},"
                f"{entry[image]['Patient ID']},test,{site_of[image]}\n")
by_site = json.loads(e2e.run("eval", "--model", model, "--data", "csv:" + site_csv, "--split", "test", "--json",
                             "--threads", "1", "--subgroup", "site").stdout)
sites = [g for g in by_site["subgroups"] if g["attribute"] == "site"]
worst, compared = 0.0, 0
for g in sites:
    member = np.array([site_of[i] == g["group"] for i in test_images])
    for l, name in enumerate(FINDINGS):
        t = targets[member, l]
        if name in g["roc_auc"] and 0 < t.sum() < len(t):
            worst, compared = max(worst, abs(g["roc_auc"][name]["value"] - roc_auc_score(t, logits[member, l]))), \
                compared + 1
checks.check(sorted(g["group"] for g in sites) == ["A", "B"] and "site" not in by_site["auc"] and compared > 5 and
             worst < 1e-6, "eval --subgroup site on a csv: dataset: per-site AUCs = sklearn, site not a label",
             f"{compared} compared, max difference {worst:.2e}")
refused = e2e.run("eval", "--model", model, "--data", data, "--subgroup", "site", expect_ok=False)
checks.check(refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1 and
             "--subgroup" in refused.stderr, "eval --subgroup on a chestxray14: dataset: one line, exit 1",
             refused.stderr.strip()[:200])

# Localization on boxes: the sample's copy of NIH's box list has 9 boxes, all on test images; whole-image boxes
# (a generic list in the 64-pixel images' own coordinates) are always pointing-game hits.
boxes = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "test", "--json", "--threads", "1",
                           "--boxes", os.path.join(sample, "BBox_List_2017.csv")).stdout)["localization"]
per = {name: v["boxes"] for name, v in boxes["per_finding"].items()}
checks.check(boxes["boxes"] == 9 and per == {"Atelectasis": 5, "Infiltration": 2, "Pneumonia": 2} and
             not boxes["skipped"], "eval --boxes: the sample's 9 boxes evaluated (Infiltrate read as Infiltration)",
             f"{boxes['boxes']} {per} {boxes['skipped']}")
whole = os.path.join(root, "whole-image-boxes.csv")
with open(os.path.join(sample, "BBox_List_2017.csv")) as f, open(whole, "w") as g:
    g.write("image,finding,x,y,w,h\n")
    for line in list(f)[1:]:
        image, finding = line.split(",")[:2]
        g.write(f"{image},{finding.replace('Infiltrate', 'Infiltration')},0,0,64,64\n")
    g.write("00000001_000.png,Cardiomegaly,0,0,64,64\n")  # a train image: skipped and counted
boxes = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "test", "--json", "--threads", "1",
                           "--boxes", whole).stdout)["localization"]
checks.check(boxes["boxes"] == 9 and boxes["skipped"] == {"image not in the test split": 1} and
             all(v["pointing_game"]["value"] == 1 and v["mass_inside"]["value"] > 0.999
                 for v in boxes["per_finding"].values()),
             "eval --boxes: whole-image boxes are all hits; a box of another split is skipped with its reason",
             f"{boxes}"[:300])
defined = [v for v in evaluation["auc"].values() if v is not None]
checks.check(abs(evaluation["mean_auc"] - np.mean(defined)) < 1e-12, "mean_auc is the mean of the defined AUCs")
spread = np.ptp(probabilities, axis=0).min()
checks.check(spread > 1e-4, "the trained model's scores vary across images", f"smallest range {spread:.2e}")

# The validation split of this sample lacks some findings: null there, a number elsewhere, and the same
# evaluation as the trainer's final one.
evaluation = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "val", "--json", "--threads",
                                "1").stdout)
rows = evaluation["rows"]
per_label = evaluation["detail"]["roc_auc"]["per_label"]
nulls = [name for name, value in evaluation["auc"].items() if value is None]
checks.check(len(evaluation["auc"]) == 14 and 0 < len(nulls) < 14, "val: 14 findings, some null", f"null: {nulls}")
checks.check(all((evaluation["auc"][n] is None) == (per_label[n]["positives"] in (0, rows)) for n in FINDINGS),
             "val: null exactly where a finding has one class")
final = [x for x in e2e.read_metrics(out) if x["type"] == "final_eval" and x["split"] == "val"][0]
checks.check(final["auc"] == evaluation["auc"], "val: eval on model/ = the trainer's final evaluation")

e2e.cleanup(root)
checks.finish()
