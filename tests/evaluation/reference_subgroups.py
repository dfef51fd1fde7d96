"""Subgroup ROC-AUCs and their paired bootstrap recomputed in float64 with scikit-learn from the resamples vitpipe
drew. Reads DIR/subgroups_input.json ({"scores" [rows][labels], "targets", "patients" [rows], "attributes":
{name: [group or "" per row]}, "draws": [resample][drawn patient names], "confidence", "gaps": [{"label",
"attribute", "high", "low"}]}). Per attribute and group: roc_auc_score per label on the group's rows (null with one
class), and over the resamples (every row of each drawn patient that lies in the group; a patient drawn twice
brings its rows twice) the percentile interval of the defined AUCs; the AUC of the rest (the attribute's other
groups) and the interval of the group's minus the rest's over the resamples where both are defined; per requested
gap the percentile interval of high minus low over the resamples where both are defined. Writes DIR/subgroups_reference.json."""
import json
import sys

import numpy as np
from sklearn.metrics import roc_auc_score


def auc(t, s):
    return float(roc_auc_score(t, s)) if 0 < t.sum() < len(t) else None


def interval(values, confidence, total):
    if not values:
        return None
    percent = 100.0 * confidence
    values = np.asarray(values, dtype=np.float64)
    return {"low": float(np.percentile(values, (100.0 - percent) / 2.0)),
            "high": float(np.percentile(values, (100.0 + percent) / 2.0)), "skipped": total - len(values)}


def main(out_dir):
    with open(f"{out_dir}/subgroups_input.json") as f:
        case = json.load(f)
    scores = np.asarray(case["scores"], dtype=np.float64)
    targets = np.asarray(case["targets"], dtype=np.int64)
    patients = np.asarray(case["patients"])
    rows_of = {p: np.flatnonzero(patients == p) for p in np.unique(patients)}
    resample_rows = [np.concatenate([rows_of[p] for p in draw]) for draw in case["draws"]]
    labels = scores.shape[1]
    total = len(resample_rows)
    out = {"groups": {}, "gaps": []}
    per_resample = {}
    for name, groups in case["attributes"].items():
        groups = np.asarray(groups)
        for group in sorted(set(groups) - {""}):
            member = groups == group
            rows = np.flatnonzero(member)
            entry = {"images": int(len(rows)), "auc": [], "ci": []}
            draws = []
            for rs in resample_rows:
                kept = rs[member[rs]]
                draws.append([auc(targets[kept, l], scores[kept, l]) for l in range(labels)])
            per_resample[(name, group)] = draws
            # The rest: the attribute's other groups (rows it left out are in neither).
            rest = (groups != "") & ~member
            rest_rows = np.flatnonzero(rest)
            rest_draws = []
            for rs in resample_rows:
                kept = rs[rest[rs]]
                rest_draws.append([auc(targets[kept, l], scores[kept, l]) for l in range(labels)])
            entry["rest"], entry["gap_vs_rest_ci"] = [], []
            for l in range(labels):
                entry["auc"].append(auc(targets[rows, l], scores[rows, l]))
                values = [d[l] for d in draws if d[l] is not None]
                entry["ci"].append(interval(values, case["confidence"], total) if entry["auc"][-1] is not None
                                   else None)
                entry["rest"].append(auc(targets[rest_rows, l], scores[rest_rows, l]))
                gaps = [d[l] - r[l] for d, r in zip(draws, rest_draws) if d[l] is not None and r[l] is not None]
                both = entry["auc"][-1] is not None and entry["rest"][-1] is not None
                entry["gap_vs_rest_ci"].append(interval(gaps, case["confidence"], total) if both else None)
            out["groups"][f"{name}={group}"] = entry
    for gap in case["gaps"]:
        high = per_resample[(gap["attribute"], gap["high"])]
        low = per_resample[(gap["attribute"], gap["low"])]
        l = gap["label"]
        values = [h[l] - w[l] for h, w in zip(high, low) if h[l] is not None and w[l] is not None]
        out["gaps"].append(interval(values, case["confidence"], total))
    with open(f"{out_dir}/subgroups_reference.json", "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1])
