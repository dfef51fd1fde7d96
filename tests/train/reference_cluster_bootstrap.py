"""The patient-level (cluster) bootstrap recomputed in float64 NumPy + scikit-learn from the resamples vitpipe drew.
Reads DIR/cluster_input.json ({"labels", "scores" [rows][labels], "targets", "patients" [rows], "draws":
[resample][drawn patient names], "confidence"}), builds each resample as every row of each drawn patient (a patient
drawn twice brings its rows twice), scores it with roc_auc_score and average_precision_score per label (skipping a
label whose resample has one class, or no positive for AP), and writes DIR/cluster_reference.json: per resample and
label the two metrics (null where skipped), per label and for the mean the percentile interval (numpy.percentile)
and the number of skipped resamples."""
import json
import sys
import warnings

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score


def interval(values, confidence, total):
    if not values:
        return None
    values = np.asarray(values, dtype=np.float64)
    percent = 100.0 * confidence
    return {"low": float(np.percentile(values, (100.0 - percent) / 2.0)),
            "high": float(np.percentile(values, (100.0 + percent) / 2.0)),
            "resamples": len(values), "skipped": total - len(values)}


def main(out_dir):
    with open(f"{out_dir}/cluster_input.json") as f:
        case = json.load(f)
    scores = np.asarray(case["scores"], dtype=np.float64)
    targets = np.asarray(case["targets"], dtype=np.int64)
    patients = np.asarray(case["patients"])
    rows_of = {p: np.flatnonzero(patients == p) for p in np.unique(patients)}
    labels = scores.shape[1]
    auc = []
    ap = []
    for draw in case["draws"]:
        rows = np.concatenate([rows_of[p] for p in draw])
        auc_b, ap_b = [], []
        for label in range(labels):
            t, s = targets[rows, label], scores[rows, label]
            auc_b.append(float(roc_auc_score(t, s)) if len(np.unique(t)) == 2 else None)
            if t.sum() == 0:
                ap_b.append(None)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ap_b.append(float(average_precision_score(t, s)))
        auc.append(auc_b)
        ap.append(ap_b)
    total = len(case["draws"])
    # Labels defined on the full data; the mean's interval uses the resamples where all of them are defined.
    full = [len(np.unique(targets[:, label])) == 2 for label in range(labels)]
    means = [np.mean([a[label] for label in range(labels) if full[label]]) for a in auc
             if all(a[label] is not None for label in range(labels) if full[label])]
    reference = {
        "roc_auc": auc,
        "average_precision": ap,
        "roc_auc_ci": [interval([a[label] for a in auc if a[label] is not None], case["confidence"], total)
                       for label in range(labels)],
        "mean_roc_auc_ci": interval([float(m) for m in means], case["confidence"], total),
    }
    with open(f"{out_dir}/cluster_reference.json", "w") as f:
        json.dump(reference, f)


if __name__ == "__main__":
    main(sys.argv[1])
