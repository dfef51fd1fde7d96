"""References for masked labels, written to OUT_DIR/masked_cases.json for tests/train/test_masked_labels.cpp:
the masked BCE-with-logits loss and its gradient by float64 PyTorch autograd (the per-element loss of
torch.nn.BCEWithLogitsLoss(reduction="none", pos_weight=...) times the 0/1 weight, summed and divided by the sum
of the weights), and scikit-learn's roc_auc_score / average_precision_score of each label over its known rows."""
import json
import sys
import warnings

import numpy as np


def f32(values):
    return [float(v) for v in np.asarray(values, dtype=np.float32).ravel()]


def loss_case(name, rng, rows, labels, known_share, pos_weight):
    logits = np.asarray(rng.normal(scale=3.0, size=(rows, labels)), dtype=np.float32)
    targets = np.asarray(rng.random((rows, labels)) < 0.4, dtype=np.float32)
    weights = np.asarray(rng.random((rows, labels)) < known_share, dtype=np.float32)
    pw = np.asarray(rng.uniform(0.5, 4.0, size=labels), dtype=np.float32) if pos_weight else None
    import torch  # only the loss cases need it (its import takes seconds)
    x = torch.tensor(logits.astype(np.float64), requires_grad=True)
    criterion = torch.nn.BCEWithLogitsLoss(reduction="none",
                                           pos_weight=None if pw is None else torch.tensor(pw.astype(np.float64)))
    w = torch.tensor(weights.astype(np.float64))
    loss = (criterion(x, torch.tensor(targets.astype(np.float64))) * w).sum() / w.sum()
    loss.backward()
    # torch's own `weight` argument with a sum reduction is the same numerator.
    summed = torch.nn.BCEWithLogitsLoss(weight=w, reduction="sum",
                                        pos_weight=None if pw is None else torch.tensor(pw.astype(np.float64)))(
        x.detach(), torch.tensor(targets.astype(np.float64)))
    return {"name": name, "rows": rows, "labels": labels, "logits": f32(logits), "targets": f32(targets),
            "weights": f32(weights), "pos_weight": None if pw is None else f32(pw), "weight_sum": float(w.sum()),
            "loss": float(loss), "loss_sum_torch_weight": float(summed), "grad": [float(v) for v in x.grad.ravel()]}


def auc_case(name, scores, targets, weights):
    from sklearn.metrics import average_precision_score, roc_auc_score
    auc, ap, known = [], [], []
    for label in range(scores.shape[1]):
        keep = weights[:, label] != 0
        s, t = scores[keep, label].astype(np.float64), targets[keep, label]
        known.append(int(keep.sum()))
        auc.append(float(roc_auc_score(t, s)) if len(np.unique(t)) == 2 else None)
        if t.sum() == 0:
            ap.append(None)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ap.append(float(average_precision_score(t, s)))
    return {"name": name, "rows": scores.shape[0], "labels": scores.shape[1], "scores": f32(scores),
            "targets": f32(targets), "weights": f32(weights), "roc_auc": auc, "average_precision": ap,
            "known": known}


def main(what, out_dir):
    """what: "loss" (torch) or "auc" (scikit-learn)."""
    rng = np.random.default_rng(13)
    if what == "loss":
        cases = [loss_case("half known, pos_weight", rng, 24, 7, 0.5, True),
                 loss_case("mostly known", rng, 16, 14, 0.9, False),
                 loss_case("few known", rng, 9, 5, 0.15, True)]
    else:
        n = 400
        scores = np.round(rng.normal(size=(n, 5)), 1).astype(np.float32)  # ties
        targets = (rng.random((n, 5)) < 0.3).astype(np.float32)
        weights = (rng.random((n, 5)) < np.array([1.0, 0.6, 0.2, 0.0, 0.5])).astype(np.float32)
        targets[weights[:, 4] != 0, 4] = 1  # label 4: its known rows hold one class only
        # Masked rows carry targets and scores that would change the AUC if they were used.
        targets[weights[:, 1] == 0, 1] = 1
        scores[weights[:, 1] == 0, 1] = 9.0
        cases = [auc_case("masked labels", scores, targets, weights)]
    with open(f"{out_dir}/masked_{what}.json", "w") as f:
        json.dump(cases, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
