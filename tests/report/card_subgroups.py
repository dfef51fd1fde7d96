"""The model card's subgroup section against `vitpipe eval --json` on the same split. A tiny ViT trained for two
steps on the bundled NIH ChestX-ray14 sample; `vitpipe eval --split test --bootstrap 200 --thresholds
RUN/thresholds.json --save-predictions RUN/predictions-test.csv --json` writes the split's predictions (what the card
reads) and prints its subgroups; `vitpipe card` regenerates the card. Every cell of the card's three subgroup tables
(per subgroup: images, patients, underdiagnosis at both thresholds; the largest gap per finding with its interval;
per finding and subgroup: positives / negatives, ROC-AUC and interval, gap against the rest and interval, TPR / FPR
at both thresholds) equals eval's JSON printed to the card's 3 decimals, and the tables have exactly eval's rows: no
number the evaluation did not compute. A run whose predictions carry no sex, age or view, and a model without a run,
say "not evaluated"."""

import csv
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

checks = e2e.Checks()
root = e2e.temp_dir("card_subgroups")
data = "chestxray14:" + os.path.join(e2e.SOURCE_DIR, "data", "chestxray14-sample")
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", "chestxray14", "--seed", "0", "--out", init)
run = os.path.join(root, "run")
e2e.run(*e2e.train_args(init, data, run, "--max-steps", "2", "--batch-size", "16", "--lr", "5e-4", "--seed", "0",
                        "--test"))
model = os.path.join(run, "model")
thresholds = os.path.join(run, "thresholds.json")
evaluation = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "test", "--bootstrap", "200",
                                "--thresholds", thresholds, "--save-predictions",
                                os.path.join(run, "predictions-test.csv"), "--json", "--threads", "2",
                                "--loader-threads", "1").stdout)
e2e.run("card", model)
card = open(os.path.join(model, "README.md")).read()


def section(text):
    start = text.index("## Subgroups\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def tables(text):
    """Each Markdown table of `text` as a list of rows (cells stripped), header and rule dropped."""
    out, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if current is None:
                current = {"header": cells, "rows": []}
                out.append(current)
            elif not all(set(c) <= set("-: ") for c in cells):
                current["rows"].append(cells)
        else:
            current = None
    return out


def f3(v):
    return f"{v:.3f}"


def interval(ci):
    return "undefined" if ci is None else f"{f3(ci['low'])} to {f3(ci['high'])}"


def rates(point):
    if point is None:
        return "no threshold"
    p = point
    tpr = f3(p["tp"] / (p["tp"] + p["fn"])) if p["tp"] + p["fn"] > 0 else "undefined"
    fpr = f3(p["fp"] / (p["fp"] + p["tn"])) if p["fp"] + p["tn"] > 0 else "undefined"
    return f"{tpr} / {fpr}"


def underdiagnosis(u, kind):
    if u["images_with_finding"] == 0:
        return "undefined (no image with a finding)"
    return "no threshold" if u[kind] is None else f"{f3(u[kind])} of {u['images_with_finding']}"


subgroups = section(card)
found = tables(subgroups)
checks.check(len(found) == 3, "the card has the subgroup tables: groups, largest gaps, every finding by subgroup",
             f"{len(found)}")
checks.check("on the **test** split" in subgroups and "chosen on the val split" in subgroups,
             "the section names its split and where its thresholds were chosen")
groups, gaps, detail = (found + [{"rows": []}] * 3)[:3]

expected_groups = [[g["attribute"], g["group"], str(g["images"]), str(g["patients"]),
                    underdiagnosis(g["underdiagnosis"], "youden"), underdiagnosis(g["underdiagnosis"], "sensitivity_90")]
                   for g in evaluation["subgroups"]]
checks.check(len(expected_groups) >= 6, "eval reports sex, age band and view subgroups on the sample's test split",
             f"{len(expected_groups)}")
checks.check(groups["rows"] == expected_groups, "per subgroup: images, patients, underdiagnosis = eval --json",
             f"{[(a, b) for a, b in zip(groups['rows'], expected_groups) if a != b][:2]}")

expected_gaps = [[g["finding"], g["attribute"], f"{g['high']['group']} {f3(g['high']['auc'])}",
                  f"{g['low']['group']} {f3(g['low']['auc'])}", f3(g["gap"]), interval(g["ci"])]
                 for g in evaluation["subgroup_gaps"]]
checks.check(len(expected_gaps) > 0 and gaps["rows"] == expected_gaps,
             "the largest gap per finding and its paired interval = eval --json",
             f"{[(a, b) for a, b in zip(gaps['rows'], expected_gaps) if a != b][:2]}")

expected_detail = []
id2label = json.load(open(os.path.join(model, "config.json")))["id2label"]
for finding in [id2label[str(i)] for i in range(len(id2label))]:  # the card's order: the model's labels
    for g in evaluation["subgroups"]:
        a = g["roc_auc"][finding]
        p = g["operating_points"][finding]
        expected_detail.append([
            finding, g["attribute"], g["group"], f"{a['positives']} / {a['negatives']}",
            "too few" if a["value"] is None else f3(a["value"]), "" if a["value"] is None else interval(a["ci"]),
            "undefined" if a["gap_vs_rest"] is None else f3(a["gap_vs_rest"]),
            "" if a["gap_vs_rest"] is None else interval(a["gap_vs_rest_ci"]),
            rates(p["youden"]), rates(p["sensitivity_90"])])
wrong = [(a, b) for a, b in zip(detail["rows"], expected_detail) if a != b]
checks.check(len(detail["rows"]) == len(expected_detail) and not wrong,
             "per finding and subgroup: ROC-AUC, interval, gap vs the rest, interval, TPR / FPR = eval --json",
             f"{len(detail['rows'])} vs {len(expected_detail)} rows; {wrong[:2]}")
defined = sum(1 for row in expected_detail if row[6] != "undefined")
checks.check(defined > 20, "most subgroups have a gap against the rest", f"{defined}")
checks.check(all(g["roc_auc"][f]["value"] is None or g["roc_auc"][f]["ci"] is not None
                 for g in evaluation["subgroups"] for f in g["roc_auc"]),
             "eval computed an interval for every defined subgroup AUC (so the card's intervals are eval's)")

# The same run, its predictions without sex, age and view: not evaluated, nothing else in the section.
bare = os.path.join(root, "bare")
os.makedirs(bare)
for name in os.listdir(run):
    if os.path.isfile(os.path.join(run, name)):
        with open(os.path.join(run, name), "rb") as f, open(os.path.join(bare, name), "wb") as g:
            g.write(f.read())
for split in ("val", "test"):
    path = os.path.join(bare, f"predictions-{split}.csv")
    with open(path) as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    for row in rows:
        row["sex"], row["age"], row["view"] = "", "", ""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
bare_model = os.path.join(root, "bare-model")
os.makedirs(bare_model)
for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
    with open(os.path.join(model, name), "rb") as f, open(os.path.join(bare_model, name), "wb") as g:
        g.write(f.read())
e2e.run("card", bare_model, "--run", bare)
text = section(open(os.path.join(bare_model, "README.md")).read())
checks.check("Not evaluated: the test split's predictions carry no sex, age or view" in text and not tables(text),
             "predictions without sex, age or view: the card says not evaluated, with no table", text[:200])

# A model with no run: not evaluated.
e2e.run("card", init)
text = section(open(os.path.join(init, "README.md")).read())
checks.check("Not evaluated: no training run is known" in text and not re.search(r"\d\.\d", text),
             "a model without a run: not evaluated, no number", text[:200])

e2e.cleanup(root)
checks.finish()
