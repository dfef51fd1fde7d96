"""What a training run leaves behind, read back from elsewhere (issue 45, defects 1 and 2):
- run files name a local model by its absolute path: train_options.json's "model" (and "data"), a checkpoint's
  base_model and the adapter's base_model_name_or_path, for a run started from its directory with `--model mini`;
  from another directory `predict --model RUN/adapter` and `export RUN` then work offline (before: "mini" taken for
  a Hub id); a run recorded before (relative --data) still resumes;
- a base model moved away is refused with one line naming its recorded path (predict on the adapter, export of a
  checkpoint), not looked up on the Hub;
- `export RUN` writes the run's best model (RUN/model), not its newest checkpoint (validation labels inverted, so
  the best evaluation is the first and differs from the last); `export RUN --adapter` the best model's checkpoint;
- `--keep-checkpoints N` keeps the newest N checkpoints and the best model's; 0 is refused with one line;
- every other path typed and stored (--output-dir, --trace, a --labels FILE, --profile-cache) is absolute in
  train_options.json, and `train --resume --output-dir RUN` continues the run from another directory."""

import json
import os
import shutil
import subprocess
import sys

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("runfiles")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 64, "val": 32}, seed=5)
rows = e2e.read_csv_rows(csv)
inverted = os.path.join(root, "data", "inverted.csv")  # validation labels flipped: training makes its AUC fall
with open(inverted, "w") as f:
    f.write("path,split," + ",".join(e2e.BLOB_LABELS) + "\n")
    for x in rows:
        flip = x["split"] == "val"
        f.write(f"{x['path']},{x['split']}," + ",".join(str(1 - int(x[n]) if flip else int(x[n]))
                                                          for n in e2e.BLOB_LABELS) + "\n")
elsewhere = os.path.join(root, "elsewhere")
os.makedirs(elsewhere)
OFFLINE = dict(os.environ, HF_HUB_OFFLINE="1")  # a model taken for a Hub id fails at once, not after a download


def vitpipe(*args, cwd=root, expect_ok=True):
    command = [os.path.abspath(e2e.VITPIPE) if os.sep in e2e.VITPIPE else e2e.VITPIPE, *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=OFFLINE)
    if expect_ok and result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(command)} (in {cwd}) exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result


def error_lines(result):
    return [line for line in result.stderr.splitlines() if line.startswith("error")]


COMMON = ["--data", "csv:data/inverted.csv", "--loader-threads", "1", "--threads", "1", "--batch-size", "32",
          "--micro-batch-size", "8", "--lr", "2e-3", "--warmup-steps", "2", "--no-augment", "--eval-every", "1",
          "--checkpoint-every", "1", "--max-steps", "6"]
# Typed as a new user types them: relative to the run's directory.
vitpipe("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "3", "--out", "mini")
mini = os.path.join(root, "mini")

# --- defect 2: a run directory means its best model; --keep-checkpoints ---
refused = vitpipe("train", "--model", "mini", "--output-dir", "zero", *COMMON, "--keep-checkpoints", "0",
                  expect_ok=False)
checks.check(refused.returncode != 0 and len(error_lines(refused)) == 1 and "--keep-checkpoints" in refused.stderr,
             "--keep-checkpoints 0 is refused with one line", refused.stderr.strip()[-200:])
full = os.path.join(root, "full")
vitpipe("train", "--model", "mini", "--output-dir", "full", *COMMON, "--keep-checkpoints", "2")
evals = [x for x in e2e.read_metrics(full) if x["type"] == "eval"]
best_step = max(evals, key=lambda x: (x["mean_auc"], -x["step"]))["step"]
print("inverted validation mean ROC-AUC by step:", [(x["step"], round(x["mean_auc"], 4)) for x in evals])
checks.check(best_step < 5, "the best evaluation comes before the kept newest two", f"best step {best_step}")
kept = sorted(n for n in os.listdir(os.path.join(full, "checkpoints")) if n.startswith("step-"))
expected = sorted({f"step-{best_step:08d}", "step-00000005", "step-00000006"})
checks.check(kept == expected, "--keep-checkpoints 2 keeps the newest two and the best model's", str(kept))
exported = os.path.join(root, "exported_full")
vitpipe("export", full, "--out", exported, cwd=elsewhere)
weights = e2e.read_safetensors(os.path.join(exported, "model.safetensors"))[0]
ok, detail = e2e.same_tensors(weights, e2e.read_safetensors(os.path.join(full, "model", "model.safetensors"))[0])
checks.check(ok, "export RUN writes RUN/model (the best model) bit for bit", detail)
ok, _ = e2e.same_tensors(weights, e2e.read_safetensors(os.path.join(full, "checkpoints", "step-00000006",
                                                                     "model.safetensors"))[0])
checks.check(not ok, "... which differs from the newest checkpoint")
best_weights = os.path.join(full, "checkpoints", f"step-{best_step:08d}", "model.safetensors")
ok, detail = e2e.same_tensors(weights, e2e.read_safetensors(best_weights)[0]) if os.path.exists(best_weights) else (
    False, "not kept")
checks.check(ok, "... and equals the kept checkpoint of the best step", detail)

# A run recorded before absolute paths (--data as typed) resumes from its directory with the same relative --data.
state_path = os.path.join(full, "checkpoints", "step-00000006", "trainer_state.json")
state = json.load(open(state_path))
state["options"]["data"] = "csv:data/inverted.csv"
json.dump(state, open(state_path, "w"), indent=2)
resumed = vitpipe("train", "--model", "mini", "--output-dir", "full", *COMMON[:-1], "7", "--resume", expect_ok=False)
checks.check(resumed.returncode == 0, "an older run's relative --data still resumes", resumed.stderr.strip()[-300:])

# --- defect 1: run files keep absolute local paths (a LoRA run: checkpoints hold only what trains) ---
lora = os.path.join(root, "lora")
vitpipe("train", "--model", "mini", "--output-dir", "lora", *COMMON, "--lora", "4", "--export-adapter")
options = json.load(open(os.path.join(lora, "train_options.json")))
checks.check(options["model"] == mini, "train_options.json names the model by its absolute path", options["model"])
checks.check(options["data"] == "csv:" + inverted, "... and the data by theirs", options["data"])
adapter_config = json.load(open(os.path.join(lora, "adapter", "adapter_config.json")))
checks.check(adapter_config["base_model_name_or_path"] == mini, "the adapter names its base by its absolute path",
             adapter_config["base_model_name_or_path"])
newest = os.path.join(lora, "checkpoints", "step-00000006")
_, metadata = e2e.read_safetensors(os.path.join(newest, "trainable.safetensors"))
checks.check(metadata.get("base_model") == mini, "a checkpoint names its base by its absolute path",
             str(metadata.get("base_model")))
image = os.path.join(root, "data", rows[0]["path"])
predicted = vitpipe("predict", "--model", os.path.join(lora, "adapter"), image, "--threads", "1", cwd=elsewhere,
                    expect_ok=False)
checks.check(predicted.returncode == 0 and predicted.stdout.strip(), "from another directory, predict --model "
             "RUN/adapter finds its base", predicted.stderr.strip()[-300:])
merged = os.path.join(root, "exported_lora")
result = vitpipe("export", lora, "--out", merged, cwd=elsewhere, expect_ok=False)
checks.check(result.returncode == 0, "from another directory, export RUN of a LoRA run works",
             result.stderr.strip()[-300:])
if result.returncode == 0:
    ok, detail = e2e.same_tensors(e2e.read_safetensors(os.path.join(merged, "model.safetensors"))[0],
                                  e2e.read_safetensors(os.path.join(lora, "model", "model.safetensors"))[0])
    checks.check(ok, "... and writes its best model, RUN/model", detail)
adapter_out = os.path.join(root, "adapter_out")
result = vitpipe("export", lora, "--out", os.path.join(root, "merged_again"), "--adapter", adapter_out,
                 cwd=elsewhere, expect_ok=False)
checks.check(result.returncode == 0 and os.path.exists(os.path.join(adapter_out, "adapter_config.json")),
             "export RUN --adapter writes the best model's adapter", result.stderr.strip()[-300:])
if result.returncode == 0:
    ok, detail = e2e.same_tensors(e2e.read_safetensors(os.path.join(adapter_out, "adapter_model.safetensors"))[0],
                                  e2e.read_safetensors(os.path.join(lora, "adapter", "adapter_model.safetensors"))[0])
    checks.check(ok, "... the same as the run's own adapter/ (both of the best step)", detail)

# Every path typed (relative) and stored in the run files is absolute there: --output-dir, --trace, a --labels FILE,
# --profile-cache; `train --resume --output-dir RUN` alone then continues from another directory (before: the labels
# file and the trace were looked up, and written, relative to wherever the resume ran).
with open(os.path.join(root, "labels.json"), "w") as f:
    json.dump({"labels": e2e.BLOB_LABELS}, f)
vitpipe("train", "--model", "mini", "--output-dir", "paths", *COMMON[:-1], "3", "--trace", "paths-trace.json",
        "--labels", "labels.json", "--profile-cache", "profiles")
options = json.load(open(os.path.join(root, "paths", "train_options.json")))
for key, typed in [("output_dir", "paths"), ("trace", "paths-trace.json"), ("labels", "labels.json"),
                   ("profile_cache", "profiles")]:
    checks.check(options[key] == os.path.join(root, typed),
                 f"train_options.json records --{key.replace('_', '-')} {typed} by its absolute path", options[key])
os.remove(os.path.join(root, "paths-trace.json"))
result = vitpipe("train", "--resume", "--output-dir", os.path.join(root, "paths"), "--max-steps", "5", cwd=elsewhere,
                 expect_ok=False)
checks.check(result.returncode == 0, "from another directory, train --resume --output-dir RUN continues the run",
             result.stderr.strip()[-300:])
checks.check(os.path.exists(os.path.join(root, "paths", "checkpoints", "step-00000005")),
             "... to its new end (step 5)")
checks.check(os.path.exists(os.path.join(root, "paths-trace.json")) and
             not os.path.exists(os.path.join(elsewhere, "paths-trace.json")),
             "... writing its trace where the run recorded it, not in the working directory")

# A base that moved: one line naming where it was, no Hub lookup.
shutil.move(mini, os.path.join(root, "mini-moved"))
for what, args in [("predict --model RUN/adapter", ["predict", "--model", os.path.join(lora, "adapter"), image]),
                   ("export CHECKPOINT", ["export", newest, "--out", os.path.join(root, "never")])]:
    result = vitpipe(*args, cwd=elsewhere, expect_ok=False)
    lines = error_lines(result)
    checks.check(result.returncode != 0 and len(lines) == 1 and mini in lines[0] and "moved" in lines[0] and
                 "Hub" not in lines[0] and "cache" not in lines[0],
                 f"{what} with the base moved: one line naming {mini}", result.stderr.strip()[-300:])
checks.check(not os.path.exists(os.path.join(root, "never")), "... and nothing is written")

e2e.cleanup(root)
checks.finish()
