#!/usr/bin/env python3
"""The report sections of issue 44 on a trained run. `train --subgroup COLUMN`: on a csv: copy of the bundled
ChestX-ray14 sample with made-up "site" and "scanner" columns, a short vit-micro run with --test writes, in each
final_eval record of metrics.jsonl, the subgroups beside the other metrics under the names `eval --json` uses ("subgroups", "subgroup_gaps", "subgroup_left_out"); each
site's AUC equals scikit-learn's roc_auc_score on that site's rows of the run's predictions-SPLIT.csv (which
carries a subgroup:site column); the report shows the site in its forest plots; `vitpipe report RUN` rebuilt from
the files shows the same; train --subgroup on a chestxray14: dataset is refused in one line. Localization: train's own
report says the heatmaps were not evaluated on boxes; `eval --boxes BBox_List_2017.csv --save-localization
RUN/localization-test.json` scores exactly the sample's 9 boxes (5 Atelectasis, 2 Infiltration, 2 Pneumonia) and
keeps the 6 worst with the box drawn (white pixels on the overlay); `vitpipe report RUN` then shows per finding the
boxes, the pointing game and T(IoBB) at 0.1 .. 0.7 with intervals, and those images."""
import csv
import json
import os
import re
import sys

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

checks = e2e.Checks()
root = e2e.temp_dir("train_subgroups")
sample = os.path.join(e2e.SOURCE_DIR, "data", "chestxray14-sample")
with open(os.path.join(sample, "Data_Entry_2017_v2020.csv")) as f:
    entry = {row["Image Index"]: row for row in csv.DictReader(f)}
test_images = {line.strip() for line in open(os.path.join(sample, "test_list.txt")) if line.strip()}
site_of = {image: "A" if int(row["Patient ID"]) % 2 else "B" for image, row in entry.items()}
data_csv = os.path.join(root, "sites.csv")


def split_of(image, row):  # the official test list; a fifth of the other patients for val
    return "test" if image in test_images else "val" if int(row["Patient ID"]) % 5 == 0 else "train"



with open(data_csv, "w") as f:
    f.write("path,labels,patient,split,site,view,scanner\n")
    for image, row in sorted(entry.items()):
        f.write(f"{os.path.join(sample, 'images', image)},{row['Finding Labels']},{row['Patient ID']},"
                f"{split_of(image, row)},{site_of[image]},{row['View Position']},S{int(row['Patient ID']) % 3}\n")

init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--seed", "4", "--out", init)
out = os.path.join(root, "run")
e2e.run(*e2e.train_args(init, "csv:" + data_csv, out, "--max-steps", "6", "--batch-size", "32", "--lr", "1e-3",
                        "--threads", "1", "--eval-every", "6", "--test", "--subgroup", "site", "--subgroup",
                        "scanner"))

finals = {r["split"]: r for r in e2e.read_metrics(out) if r.get("type") == "final_eval"}
checks.check(sorted(finals) == ["test", "val"], "metrics.jsonl: a final_eval record for val and test",
             f"{sorted(finals)}")
for split, record in sorted(finals.items()):
    checks.check(all(k in record for k in ("subgroups", "subgroup_gaps", "subgroup_left_out", "auc")),
                 f"final_eval {split}: subgroups beside the other metrics", f"{sorted(record)}")
    rows = e2e.read_csv_rows(os.path.join(out, f"predictions-{split}.csv"))
    checks.check(rows and "subgroup:site" in rows[0], f"predictions-{split}.csv: a subgroup:site column")
    labels = [k[5:] for k in rows[0] if k.startswith("true:")]
    sites = [g for g in record.get("subgroups", []) if g["attribute"] == "site"]
    checks.check(sorted(g["group"] for g in sites) == ["A", "B"], f"final_eval {split}: subgroups by site A and B",
                 f"{[(g['attribute'], g['group']) for g in record.get('subgroups', [])]}")
    attributes = {g["attribute"] for g in record.get("subgroups", [])}
    checks.check(attributes == {"view", "site", "scanner"}, f"final_eval {split}: the csv's view and both --subgroup "
                 "columns (repeated flag)", f"{attributes}")
    worst, compared = 0.0, 0
    for g in sites:
        member = [r for r in rows if r["subgroup:site"] == g["group"]]
        expected_site = {site_of[os.path.basename(r["image"])] for r in member}
        checks.check(expected_site == {g["group"]} and g["images"] == len(member),
                     f"{split} site {g['group']}: its rows ({len(member)}) are the csv's", f"{g['images']}")
        for name in labels:
            known = [r for r in member if r["true:" + name] != ""]
            t = np.array([int(r["true:" + name]) for r in known])
            s = np.array([float(r["logit:" + name]) for r in known])
            value = g["roc_auc"].get(name, {}).get("value")
            if 0 < t.sum() < len(t):
                worst, compared = max(worst, abs(value - roc_auc_score(t, s))), compared + 1
            else:
                checks.check(value is None, f"{split} site {g['group']} {name}: one class, listed without an AUC")
    checks.check(compared > 5 and worst < 1e-9, f"final_eval {split}: per-site AUCs = sklearn on the site's rows",
                 f"{compared} compared, max difference {worst:.2e}")
    checks.check("site" not in record["auc"], f"final_eval {split}: site is not read as a label")

# The report of the run (written by train, and rebuilt by `vitpipe report`) shows the site in its forest plots.
for name, html_path in [("train's report.html", os.path.join(out, "report.html"))]:
    html = open(html_path).read()
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
                      .group(1))
    groups = {(g["attribute"], g["group"]) for g in data.get("subgroups", {}).get("groups", [])}
    checks.check({("site", "A"), ("site", "B")} <= groups, f"{name}: subgroups by site in its data", f"{groups}")
    checks.check(html.count(">site A</text>") >= 1 and 'id="forest-plots"' in html,
                 f"{name}: the forest plots have a row for site A")
rebuilt = os.path.join(root, "rebuilt.html")
e2e.run("report", out, "--out", rebuilt)
checks.check(">site B</text>" in open(rebuilt).read(), "vitpipe report RUN: the rebuilt report shows site B too")

# Localization: not evaluated in train's report; eval --boxes --save-localization; the rebuilt report shows it.
html = open(os.path.join(out, "report.html")).read()
checks.check('id="localization-not-evaluated"' in html and 'id="localization-table"' not in html,
             "train's report.html: localization not evaluated (no boxes scored)")
box_list = os.path.join(sample, "BBox_List_2017.csv")
saved = os.path.join(out, "localization-test.json")
evaluation = json.loads(e2e.run("eval", "--model", os.path.join(out, "model"), "--data", "csv:" + data_csv, "--split",
                                "test", "--boxes", box_list, "--bootstrap", "50", "--threads", "1", "--json",
                                "--subgroup", "site", "--subgroup", "scanner",
                                "--save-localization", saved).stdout)
checks.check(evaluation["localization"]["boxes"] == 9, "eval --boxes on the sample: its 9 boxes evaluated",
             f"{evaluation['localization']['boxes']}")
checks.check(all("overlay_png" not in w for w in evaluation["localization"].get("worst_images", [])),
             "eval --json: no images in stdout's JSON")
file = json.load(open(saved))
per = {name: f["boxes"] for name, f in file["per_finding"].items()}
checks.check(file["format"] == "vitpipe-localization" and file["split"] == "test" and
             per == {"Atelectasis": 5, "Infiltration": 2, "Pneumonia": 2},
             "--save-localization: the boxes per finding", f"{per}")
worst = file.get("worst_images", [])
checks.check(len(worst) == 6, "--save-localization: the 6 worst-localized boxes", f"{len(worst)}")
order = [(w["pointing_hit"], w["iobb"], w["mass_inside"]) for w in worst]
checks.check(order == sorted(order), "worst first: pointing misses, then the lowest IoBB, then the least mass inside",
             f"{order}")
try:
    import base64
    import io

    from PIL import Image
    drawn = 0
    for w in worst:
        image = np.asarray(Image.open(io.BytesIO(base64.b64decode(w["overlay_png"]))).convert("RGB"))
        scale = image.shape[1] // 64  # the sample's 64-pixel images, enlarged for the overlay
        x0, y0 = int(round(w["box"]["x"] * scale)), int(round(w["box"]["y"] * scale))
        drawn += bool((image[y0, x0] == 255).all())  # the box's corner pixel is on the white outline
    checks.check(drawn == len(worst), "each worst image has its box's corner drawn white", f"{drawn}/{len(worst)}")
except ImportError:
    print("skip: PIL not importable for the overlay check")
rebuilt = os.path.join(root, "rebuilt-localization.html")
e2e.run("report", out, "--out", rebuilt)
html = open(rebuilt).read()
data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1))
table = html[html.find('id="localization-table"'):]
table = table[:table.find("</table>")]
rows = re.findall(r"<tr><td>([A-Za-z_]+)</td><td>(\d+)</td>((?:<td>[^<]*</td>)+)</tr>", table)
checks.check({(name, int(n)) for name, n, _ in rows} == set(per.items()) and
             all(cells.count("<td>") == 8 and cells.count(" (") == 8 for _, _, cells in rows),
             "vitpipe report RUN: a row per finding with its boxes, the pointing game and 7 T(IoBB), each with a CI",
             f"{rows[:1]}")
checks.check(data.get("localization", {}).get("per_finding") == file["per_finding"],
             "the report's embedded numbers are the file's")
images = html[html.find('id="localization-images"'):]
checks.check(images.count("<img ") >= 6 and 'id="localization-not-evaluated"' not in html,
             "vitpipe report RUN: the worst-localized images embedded")
refused = e2e.run("eval", "--model", os.path.join(out, "model"), "--data", "csv:" + data_csv, "--subgroup", "site",
                  "--subgroup", "scanner", "--save-localization", saved, expect_ok=False)
checks.check(refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1 and
             "--boxes" in refused.stderr, "eval --save-localization without --boxes: one line, exit 1",
             refused.stderr.strip()[:300])

refused = e2e.run(*e2e.train_args(init, "chestxray14:" + sample, os.path.join(root, "refused"), "--max-steps", "1",
                                  "--subgroup", "site"), expect_ok=False)
checks.check(refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1 and
             "--subgroup" in refused.stderr, "train --subgroup on a chestxray14: dataset: one line, exit 1",
             refused.stderr.strip()[:300])
e2e.cleanup(root)
checks.finish()
