"""Writes ranking-metric cases and scikit-learn's answers (roc_auc_score, average_precision_score) and numpy's
percentiles to OUT_DIR/metrics_cases.json, for tests/train/test_metrics.cpp to compare against."""
import json
import sys
import warnings

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score


def f32(values):
    return [float(v) for v in np.asarray(values, dtype=np.float32).ravel()]


def label_results(scores, targets):
    auc, ap = [], []
    for label in range(scores.shape[1]):
        s, t = scores[:, label].astype(np.float64), targets[:, label]
        if len(np.unique(t)) < 2:
            auc.append(None)
        else:
            auc.append(float(roc_auc_score(t, s)))
        if t.sum() == 0:
            ap.append(None)  # sklearn returns 0 with a warning; vitpipe calls it undefined
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ap.append(float(average_precision_score(t, s)))
    return auc, ap


def case(name, scores, targets):
    scores = np.asarray(scores, dtype=np.float32)
    targets = np.asarray(targets, dtype=np.float32)
    if scores.ndim == 1:
        scores, targets = scores[:, None], targets[:, None]
    auc, ap = label_results(scores, targets)
    return {"name": name, "rows": scores.shape[0], "labels": scores.shape[1], "scores": f32(scores),
            "targets": f32(targets), "roc_auc": auc, "average_precision": ap}


def main(out_dir):
    rng = np.random.default_rng(20240501)
    cases = []
    n, L = 300, 5
    cases.append(case("random", rng.normal(size=(n, L)), rng.random((n, L)) < 0.3))
    # Heavy ties: 6 distinct score values.
    cases.append(case("heavy_ties", rng.integers(0, 6, size=(500, 4)) / 5.0, rng.random((500, 4)) < 0.4))
    # Ties correlated with targets, plus rare positives.
    t = rng.random((400, 3)) < np.array([0.5, 0.05, 0.01])
    s = np.round(t * 0.7 + rng.normal(scale=0.5, size=t.shape), 1)
    cases.append(case("ties_rare", s, t))
    cases.append(case("all_equal", np.full((50, 2), 0.25), rng.random((50, 2)) < 0.3))
    one_class = np.zeros((20, 3))
    one_class[:, 1] = 1
    one_class[::2, 2] = 1
    cases.append(case("one_class_labels", rng.normal(size=(20, 3)), one_class))
    cases.append(case("tiny_1", [0.3], [1]))
    cases.append(case("tiny_2", [0.3, 0.7], [1, 0]))
    cases.append(case("tiny_2_tied", [0.5, 0.5], [1, 0]))
    cases.append(case("tiny_3", [0.1, 0.9, 0.4], [0, 1, 1]))
    cases.append(case("signed_zero", [-0.0, 0.0, 0.0, -0.0, 1.0, -1.0], [1, 0, 1, 0, 1, 0]))
    cases.append(case("perfect", [0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]))
    cases.append(case("inverted", [0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]))
    cases.append(case("sklearn_doc", [0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]))
    big_t = rng.random((4000, 3)) < np.array([0.1, 0.02, 0.5])
    big_s = 1 / (1 + np.exp(-(big_t * 1.2 + rng.normal(size=big_t.shape))))
    big_s[:, 1] = np.round(big_s[:, 1], 2)  # a label with many ties
    cases.append(case("large", big_s, big_t))

    percentiles = []
    for size in [1, 2, 7, 40, 1000, 999]:
        values = rng.normal(size=size)
        qs = [0.0, 2.5, 5.0, 50.0, 95.0, 97.5, 100.0, 33.3]
        percentiles.append({"values": [float(v) for v in values],
                            "q": qs, "expected": [float(np.percentile(values, q)) for q in qs]})

    with open(f"{out_dir}/metrics_cases.json", "w") as f:
        json.dump({"cases": cases, "percentiles": percentiles}, f)


if __name__ == "__main__":
    main(sys.argv[1])
