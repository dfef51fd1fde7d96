"""`vitpipe train` end to end on a generated learnable task (coloured blobs, 4 labels), one process:
- the training loss goes down and the validation mean ROC-AUC ends above 0.95;
- metrics.jsonl holds one valid object per logged step (no duplicates) and per evaluation; --test adds the test split;
- stderr is plain lines when it is not a terminal (no carriage returns or escape codes), stdout stays empty;
- model/ is a Hugging Face directory (config.json with id2label, label2id, problem_type, architectures;
  model.safetensors with format pt; preprocessor_config.json) that loads back identically: a plain-torch
  ViTForImageClassification on those files gives `vitpipe predict`'s logits, and `vitpipe eval` on it gives the
  trainer's final evaluation;
- `vitpipe export OUTPUT_DIR --out DIR` writes the latest checkpoint's weights bit for bit;
- `vitpipe eval --json` ROC-AUCs equal scikit-learn's roc_auc_score on the scores eval ranked (`--save-predictions`),
  which equal `vitpipe predict`'s logits up to batch rounding (the test split holds relabelled copies of images, so
  scores tie across different targets); --bootstrap N adds 95% intervals;
- model/ holds the best validation step's weights, or the last step's with --export-last (a validation split whose
  labels are inverted makes the first evaluation the best one)."""

import json
import os
import re

import numpy as np
from sklearn.metrics import roc_auc_score

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("learn")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 256, "val": 64, "test": 64}, relabelled_copies=16)
data = "csv:" + csv
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "3", "--out", init)

# --- the main run ---
out = os.path.join(root, "run")
r = e2e.run(*e2e.train_args(init, data, out, "--epochs", "6", "--batch-size", "32", "--micro-batch-size", "8", "--lr",
                            "2e-3", "--warmup-ratio", "0.1", "--no-augment", "--log-every", "1", "--test", "--threads", "1"))
steps = 6 * 256 // 32

# Log output when stderr is a pipe.
checks.check(r.stdout == "", "train prints nothing on stdout", r.stdout[:200])
checks.check("\r" not in r.stderr and "\x1b" not in r.stderr, "stderr has no carriage returns or escape codes")
lines = r.stderr.splitlines()
progress_lines = [line for line in lines if line.startswith("training [")]
checks.check(1 <= len(progress_lines) <= 12, "a modest number of training progress lines", f"{len(progress_lines)}")
checks.check(len(lines) < 150, "a modest number of log lines in all", f"{len(lines)}")
checks.check(any(f"{steps}/{steps}" in line for line in progress_lines), "the last progress line shows the end")
# A progress line per position at most: "evaluating val [...] 64/64" once, not again as the closing line.
positions = [(line.split(" [")[0], line.split("] ")[1].split(" ")[0])
             if line.startswith(("training [", "evaluating ")) and "] " in line else None for line in lines]
repeated = [p for p, q in zip(positions, positions[1:]) if p is not None and p == q]
checks.check(not repeated, "no progress position logged twice in a row", f"{repeated[:3]}")

# metrics.jsonl
records = e2e.read_metrics(out)
train = [x for x in records if x["type"] == "train"]
evals = [x for x in records if x["type"] == "eval"]
finals = {x["split"]: x for x in records if x["type"] == "final_eval"}
checks.check([x["step"] for x in train] == list(range(1, steps + 1)), "a train record for every step, in order")
checks.check([x["step"] for x in evals] == list(range(8, steps + 1, 8)), "an eval record at each epoch end",
             f"{[x['step'] for x in evals]}")
step_times = [x for x in records if x["type"] == "step_time"]
checks.check(len(step_times) == 1 and step_times[0]["step"] == steps and step_times[0]["measured_steps"] == steps - 1
             and step_times[0]["measured_step_seconds"] > 0, "one step_time record: the median of the steps after the "
             "first", f"{step_times}")
step_line = [line for line in lines if line.startswith("step time: median ")]
checks.check(len(step_line) == 1 and re.match(r"step time: median \d{1,3}(\.\d{1,2})? m?s of ", step_line[0]),
             "the log ends with the median step time, to 3 significant digits (ms below a second)", str(step_line))
keys = [(x["type"], x.get("split"), x["step"]) for x in records]
checks.check(len(keys) == len(set(keys)), "no duplicate records")
checks.check(all(np.isfinite(x["loss"]) and x["lr"] >= 0 and np.isfinite(x["grad_norm"]) for x in train),
             "train records carry finite loss, lr and grad_norm")
first_loss = np.mean([x["loss"] for x in train[:4]])
last_loss = np.mean([x["loss"] for x in train[-4:]])
checks.check(last_loss < 0.75 * first_loss, "the training loss goes down", f"{first_loss:.4f} -> {last_loss:.4f}")
checks.check(evals[-1]["loss"] < evals[0]["loss"], "the validation loss goes down",
             f"{evals[0]['loss']:.4f} -> {evals[-1]['loss']:.4f}")
checks.check(set(finals) == {"val", "test"}, "final evaluations of val and test (--test)", f"{sorted(finals)}")
val_auc = finals["val"]["mean_auc"]
checks.check(val_auc > 0.95, "validation mean ROC-AUC > 0.95", f"{val_auc:.4f}")
best = max(evals, key=lambda x: x["mean_auc"])
checks.check(finals["val"]["mean_auc"] == best["mean_auc"], "model/ is the best evaluation's model",
             f"final {finals['val']['mean_auc']} best {best['mean_auc']} at step {best['step']}")
print(f"validation mean ROC-AUC {val_auc:.4f}, test {finals['test']['mean_auc']:.4f}, loss {first_loss:.3f} -> "
      f"{last_loss:.3f}")

# model/: Hugging Face files.
model = os.path.join(out, "model")
with open(os.path.join(model, "config.json")) as f:
    config = json.load(f)
checks.check(config.get("id2label") == {str(i): name for i, name in enumerate(e2e.BLOB_LABELS)}, "config id2label")
checks.check(config.get("label2id") == {name: i for i, name in enumerate(e2e.BLOB_LABELS)}, "config label2id")
checks.check(config.get("problem_type") == "multi_label_classification", "config problem_type")
checks.check(config.get("architectures") == ["ViTForImageClassification"], "config architectures")
checks.check(config.get("model_type") == "vit", "config model_type")
tensors, metadata = e2e.read_safetensors(os.path.join(model, "model.safetensors"))
checks.check(metadata.get("format") == "pt", "model.safetensors metadata format pt")
checks.check(tensors["classifier.weight"].shape == (4, 64) and tensors["classifier.weight"].dtype == np.float32,
             "classifier weight F32 [4, 64]")
with open(os.path.join(model, "preprocessor_config.json")) as f:
    preprocessor = json.load(f)
checks.check(preprocessor.get("image_processor_type") == "ViTImageProcessor", "preprocessor_config.json")
state = json.load(open(os.path.join(out, "checkpoints", open(os.path.join(out, "checkpoints", "latest")).read().strip(),
                                    "trainer_state.json")))
checks.check(state["step"] == steps and state["best_step"] == best["step"], "trainer_state step and best_step",
             f"{state['step']} {state['best_step']}")
if state["best_step"] == steps:
    latest = e2e.read_safetensors(os.path.join(out, "checkpoints", f"step-{steps:08d}", "model.safetensors"))[0]
    ok, detail = e2e.same_tensors(tensors, latest)
    checks.check(ok, "model/ equals the best step's checkpoint bit for bit", detail)

# The exported model loads back identically: torch on its files gives vitpipe predict's logits.
rows = e2e.read_csv_rows(csv)
test_rows = [x for x in rows if x["split"] == "test"]
paths = [os.path.join(root, "data", x["path"]) for x in test_rows]
predict = e2e.run("predict", "--model", model, "--threads", "1", "--batch-size", "7", *paths)
predictions = [json.loads(line) for line in predict.stdout.splitlines()]
checks.check(len(predictions) == len(paths) and all(p["image"] == q for p, q in zip(predictions, paths)),
             "predict: one line per image, in order")
logits = np.array([p["logits"] for p in predictions], dtype=np.float64)
reference = e2e.torch_vit_logits(model, np.stack([e2e.preprocess_png(p, preprocessor) for p in paths]))
difference = np.max(np.abs(logits - reference))
checks.check(difference < 1e-4, "predict logits equal a torch ViT on model/'s files", f"max abs {difference:.2e}")
probabilities = np.array([[p["probabilities"][name] for name in e2e.BLOB_LABELS] for p in predictions])
checks.check(np.allclose(probabilities, 1 / (1 + np.exp(-logits)), rtol=0, atol=1e-12), "probabilities = sigmoid")

# vitpipe eval on model/ reproduces the trainer's final evaluation.
evaluation = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "val", "--json", "--threads",
                                "1").stdout)
checks.check(abs(evaluation["mean_auc"] - finals["val"]["mean_auc"]) < 1e-12 and
             evaluation["auc"] == finals["val"]["auc"], "eval --split val equals the trainer's final evaluation",
             f"{evaluation['mean_auc']} vs {finals['val']['mean_auc']}")

# vitpipe eval --json AUCs equal sklearn's on the very scores eval ranked (--save-predictions), ties included. With
# --batch-size 1 every image runs through the same GEMM shapes, so the relabelled copies get identical logits on any
# CPU (a GEMM may round a row differently by its position in a batch: oneDNN's AVX2 kernels do).
targets = np.array([[int(x[name]) for name in e2e.BLOB_LABELS] for x in test_rows])
saved = os.path.join(root, "test-predictions.csv")
evaluation = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "test", "--json", "--bootstrap",
                                "200", "--threads", "1", "--batch-size", "1", "--save-predictions", saved).stdout)
checks.check(evaluation["rows"] == len(test_rows), "eval --split test counts every row", f"{evaluation['rows']}")
saved_rows = e2e.read_csv_rows(saved)
checks.check([x["image"] for x in saved_rows] == paths and [x["patient"] for x in saved_rows] == [
    x.get("patient", "") for x in test_rows], "--save-predictions: one row per test image, in dataset order")
saved_targets = np.array([[int(x["true:" + name]) for name in e2e.BLOB_LABELS] for x in saved_rows])
saved_logits = np.array([[float(x["logit:" + name]) for name in e2e.BLOB_LABELS] for x in saved_rows])
saved_probabilities = np.array([[float(x["probability:" + name]) for name in e2e.BLOB_LABELS] for x in saved_rows])
checks.check(np.array_equal(saved_targets, targets), "--save-predictions: the CSV's labels")
checks.check(np.allclose(saved_probabilities, 1 / (1 + np.exp(-saved_logits)), rtol=0, atol=1e-15),
             "--save-predictions: probabilities = sigmoid(logits)")
difference = np.max(np.abs(saved_logits - logits))
checks.check(difference < 1e-4, "--save-predictions: logits equal predict's (up to batch rounding)",
             f"max abs {difference:.2e}")
sklearn = {name: roc_auc_score(targets[:, l], saved_logits[:, l]) for l, name in enumerate(e2e.BLOB_LABELS)}
worst = max(abs(evaluation["auc"][name] - sklearn[name]) for name in e2e.BLOB_LABELS)
checks.check(worst < 1e-12, "eval --json per-label AUC equals sklearn on the scores eval ranked",
             f"max diff {worst:.2e}")
checks.check(abs(evaluation["mean_auc"] - np.mean(list(sklearn.values()))) < 1e-12, "mean_auc equals sklearn's mean")
tied = len(saved_logits) - len(np.unique(saved_logits[:, 0]))
checks.check(tied >= 16, "the test split has tied scores", f"{tied} repeated scores")
# The trainer evaluated --test in micro-batches of 8: eval with --batch-size 8 runs the same shapes, so the same AUCs.
same_shapes = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "test", "--json", "--threads",
                                 "1", "--batch-size", "8").stdout)
checks.check(same_shapes["auc"] == finals["test"]["auc"] and
             abs(same_shapes["mean_auc"] - finals["test"]["mean_auc"]) < 1e-12,
             "eval test (batch 8) equals the trainer's --test", f"{same_shapes['mean_auc']} vs {finals['test']['mean_auc']}")
intervals = evaluation.get("auc_ci", {})
checks.check(sorted(intervals) == sorted(e2e.BLOB_LABELS) and
             all(0 <= intervals[n][0] <= intervals[n][1] <= 1 for n in e2e.BLOB_LABELS) and
             evaluation["mean_auc_ci"][0] <= evaluation["mean_auc"] + 0.02 and
             evaluation["mean_auc_ci"][1] >= evaluation["mean_auc"] - 0.02,
             "--bootstrap gives a 95% interval per label and for the mean", f"{evaluation.get('mean_auc_ci')}")

train_split = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", "train", "--json", "--threads",
                                 "1").stdout)
checks.check(train_split["rows"] == 256 and train_split["split"] == "train" and train_split["mean_auc"] > 0.9,
             "eval --split train", f"{train_split['rows']} rows, mean AUC {train_split['mean_auc']:.4f}")

# vitpipe export of the output directory = its best model (model/), bit for bit, as a Hugging Face directory
# (run_files.py checks it against a newest checkpoint that differs).
exported = os.path.join(root, "exported")
e2e.run("export", out, "--out", exported)
ok, detail = e2e.same_tensors(e2e.read_safetensors(os.path.join(exported, "model.safetensors"))[0],
                              e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))[0])
checks.check(ok, "export OUTPUT_DIR writes its best model's weights (model/)", detail)
checks.check(json.load(open(os.path.join(exported, "config.json")))["id2label"] == config["id2label"] and
             os.path.exists(os.path.join(exported, "preprocessor_config.json")), "export writes config and preprocessor")
r = e2e.run("export", os.path.join(root, "data"), "--out", os.path.join(root, "bad_export"), expect_ok=False)
checks.check(r.returncode != 0 and "neither a checkpoint" in r.stderr and not os.path.exists(
    os.path.join(root, "bad_export")), "export refuses a directory that is no checkpoint", r.stderr.strip()[-200:])

# The effective options (train_options.json) read back with --config: the same run elsewhere, flags overriding.
again = os.path.join(root, "again")
e2e.run("train", "--config", os.path.join(out, "train_options.json"), "--output-dir", again, "--max-steps", "2")
saved, reread = (json.load(open(os.path.join(d, "train_options.json"))) for d in (out, again))
changed = sorted(k for k in saved if saved[k] != reread.get(k))
checks.check(changed == ["epochs", "max_steps", "output_dir"], "train_options.json reads back with --config",
             f"changed: {changed}")

# --- best versus last: validation labels inverted, so training makes the validation ROC-AUC fall ---
inverted_csv = os.path.join(root, "data", "inverted.csv")
with open(inverted_csv, "w") as f:
    f.write("path,split," + ",".join(e2e.BLOB_LABELS) + "\n")
    for x in rows:
        flip = x["split"] == "val"
        f.write(f"{x['path']},{x['split']}," + ",".join(str(1 - int(x[n]) if flip else int(x[n]))
                                                          for n in e2e.BLOB_LABELS) + "\n")
runs = {}
for mode in ("best", "last"):
    run_dir = os.path.join(root, f"inverted_{mode}")
    extra = ["--export-last"] if mode == "last" else []
    # Step 1 runs at learning rate 0 (the warm-up's start), so the first evaluation sees the initial weights.
    e2e.run(*e2e.train_args(init, "csv:" + inverted_csv, run_dir, "--max-steps", "8", "--batch-size", "32",
                            "--micro-batch-size", "8", "--lr", "2e-3", "--warmup-steps", "2", "--no-augment",
                            "--eval-every", "1", "--checkpoint-every", "4", "--threads", "1", *extra))
    runs[mode] = run_dir
best_records = e2e.read_metrics(runs["best"])
best_evals = [x for x in best_records if x["type"] == "eval"]
print("inverted validation mean ROC-AUC by step:", [(x["step"], round(x["mean_auc"], 4)) for x in best_evals])
checks.check(best_evals[0]["mean_auc"] > best_evals[-1]["mean_auc"] + 0.05, "inverted run: validation AUC falls")
best_final = [x for x in best_records if x["type"] == "final_eval"]
checks.check([x["split"] for x in best_final] == ["val"], "without --test: no test evaluation")
checks.check(best_final[0]["mean_auc"] == max(x["mean_auc"] for x in best_evals) == best_evals[0]["mean_auc"],
             "default: model/ is the first (best) evaluation's model", f"{best_final[0]['mean_auc']}")
last_records = e2e.read_metrics(runs["last"])
last_evals = [x for x in last_records if x["type"] == "eval"]
last_final = [x for x in last_records if x["type"] == "final_eval"][0]
checks.check(last_final["mean_auc"] == last_evals[-1]["mean_auc"], "--export-last: model/ is the last step's model")
ok, detail = e2e.same_tensors(e2e.read_safetensors(os.path.join(runs["last"], "model", "model.safetensors"))[0],
                              e2e.read_safetensors(os.path.join(runs["last"], "checkpoints", "step-00000008",
                                                                "model.safetensors"))[0])
checks.check(ok, "--export-last: model/ equals the last checkpoint bit for bit", detail)
ok, _ = e2e.same_tensors(e2e.read_safetensors(os.path.join(runs["best"], "model", "model.safetensors"))[0],
                         e2e.read_safetensors(os.path.join(runs["best"], "checkpoints", "step-00000008",
                                                           "model.safetensors"))[0])
checks.check(not ok, "default: model/ differs from the last checkpoint")
ok, detail = e2e.same_tensors(e2e.read_safetensors(os.path.join(runs["best"], "model", "model.safetensors"))[0],
                              e2e.read_safetensors(os.path.join(init, "model.safetensors"))[0])
checks.check(ok, "default: model/ holds the weights after step 1 (learning rate 0: the initial ones)", detail)

e2e.cleanup(root)
checks.finish()
