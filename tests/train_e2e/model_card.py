"""The model card (README.md) that train and export write beside every model, and `vitpipe card` regenerates.
After a short training on the bundled ChestX-ray14 sample with --test: the card's YAML front matter parses with PyYAML,
carries the Hub's keys, and its model-index follows huggingface_hub's schema (repocard_data.py, transcribed below);
its roc_auc values equal the run's final evaluation exactly and `vitpipe eval --json` on the same split (to 1e-3, see
below), per finding and the mean; `vitpipe card` reproduces it byte for byte. A run that evaluated nothing, and a
model with no run, say "not evaluated" and carry no model-index; an export of a checkpoint the run did not evaluate
withholds the run's numbers. A hand-written README.md is not replaced without --force (card and export); --license,
or a Hub base model's cached card, gives the license; a LoRA run's adapter/ gets a peft card."""

import json
import os
import shutil

import yaml

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("card")
sample = os.path.join(e2e.SOURCE_DIR, "data", "chestxray14-sample")
data = "chestxray14:" + sample
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--seed", "4", "--out", init)
run = os.path.join(root, "run")
e2e.run(*e2e.train_args(init, data, run, "--max-steps", "12", "--batch-size", "32", "--lr", "1e-3", "--eval-every",
                        "6", "--checkpoint-every", "6", "--test", "--license", "apache-2.0"))
model = os.path.join(run, "model")
readme = os.path.join(model, "README.md")


def front_matter(path):
    text = open(path).read()
    checks.check(text.startswith("---\n"), f"{os.path.basename(os.path.dirname(path))}: starts with front matter")
    end = text.index("\n---\n", 4)
    return yaml.safe_load(text[4:end]), text[end + 5:]


# huggingface_hub's model-index schema (src/huggingface_hub/repocard_data.py: model_index_to_eval_results reads
# these keys, EvalResult's fields): a list of {name, results}; each result {task: {type, name?}, dataset: {name,
# type, config?, split?, revision?, args?}, metrics: [{type, value, name?, config?, args?, verified?}]}.
TASK_KEYS = ({"type"}, {"name"})
DATASET_KEYS = ({"name", "type"}, {"config", "split", "revision", "args"})
METRIC_KEYS = ({"type", "value"}, {"name", "config", "args", "verified"})


def follows_schema(model_index):
    def keys_ok(d, keys):
        required, optional = keys
        return isinstance(d, dict) and required <= set(d) and set(d) <= required | optional and \
            all(v is not None for v in d.values())
    if not isinstance(model_index, list) or len(model_index) != 1:
        return False
    entry = model_index[0]
    if set(entry) != {"name", "results"} or not isinstance(entry["name"], str) or not isinstance(entry["results"],
                                                                                                  list):
        return False
    for result in entry["results"]:
        if set(result) != {"task", "dataset", "metrics"} or not keys_ok(result["task"], TASK_KEYS) or \
                not keys_ok(result["dataset"], DATASET_KEYS) or not isinstance(result["metrics"], list):
            return False
        if not all(keys_ok(m, METRIC_KEYS) and isinstance(m["value"], float) for m in result["metrics"]):
            return False
    return True


meta, body = front_matter(readme)
checks.check(meta.get("library_name") == "transformers" and meta.get("pipeline_tag") == "image-classification",
             "front matter: library_name transformers, pipeline_tag image-classification", f"{meta}")
checks.check(meta.get("tags") == ["vision", "medical-imaging", "chest-x-ray", "vitpipe", "vit"], "front matter: tags",
             f"{meta.get('tags')}")
checks.check(meta.get("license") == "apache-2.0", "train --license reaches the card", f"{meta.get('license')}")
checks.check("base_model" not in meta, "no base_model for a model initialised from nothing on the Hub")
checks.check(meta.get("datasets") == ["chestxray14"] and meta.get("metrics") == ["roc_auc"],
             "front matter: datasets and metrics", f"{meta.get('datasets')} {meta.get('metrics')}")
checks.check(follows_schema(meta.get("model-index")), "model-index follows huggingface_hub's schema",
             json.dumps(meta.get("model-index"))[:300])
results = {r["dataset"]["split"]: r for r in meta["model-index"][0]["results"]}
checks.check(sorted(results) == ["test", "val"], "model-index: one result per evaluated split", f"{sorted(results)}")

# Its numbers are the run's evaluation of the exported model (metrics.jsonl's final_eval, eval's code) exactly, and
# `vitpipe eval --json`'s on the same split. The latter only to 1e-3: train's final evaluation runs the training
# stage, whose logits can differ from eval's inference stage in the last bit, which can reorder near-tied rows.
final = {r["split"]: r for r in e2e.read_metrics(run) if r["type"] == "final_eval"}
for split, result in results.items():
    checks.check(result["task"]["type"] == "image-classification" and
                 {k: result["dataset"].get(k) for k in ("name", "type", "split")} ==
                 {"name": "NIH ChestX-ray14", "type": "chestxray14", "split": split},
                 f"{split}: task image-classification, dataset NIH ChestX-ray14 / chestxray14 / {split}",
                 f"{result['task']} {result['dataset']}")
    card = {m["config"]: m["value"] for m in result["metrics"]}
    checks.check(all(m["type"] == "roc_auc" for m in result["metrics"]), f"{split}: every metric is roc_auc")

    def expected_of(record):
        expected = {name: v for name, v in record["auc"].items() if v is not None}
        expected["mean"] = record["mean_auc"]
        return expected
    expected = expected_of(final[split])
    checks.check(card == expected, f"{split}: model-index roc_auc per finding and mean = the run's final_eval exactly",
                 f"{len(card)} vs {len(expected)} values; differing: "
                 f"{[k for k in set(card) | set(expected) if card.get(k) != expected.get(k)]}")
    evaluation = json.loads(e2e.run("eval", "--model", model, "--data", data, "--split", split, "--json",
                                    "--threads", "2", "--loader-threads", "1").stdout)
    expected = expected_of(evaluation)
    worst = max((abs(card[k] - expected[k]) for k in expected if k in card), default=1.0)
    checks.check(set(card) == set(expected) and worst < 1e-3,
                 f"{split}: model-index roc_auc per finding and mean = vitpipe eval --json", f"worst {worst:.2e}")
    undefined = [name for name, v in evaluation["auc"].items() if v is None]
    checks.check(all(name not in card for name in undefined), f"{split}: an undefined AUC has no entry",
                 f"{undefined}")

for needed in ("not a medical device", "## Intended use", "## Out-of-scope use", "## Training data and protocol",
               "## Limitations", "## Operating points", "## Calibration", "pipeline(\"image-classification\"",
               "vitpipe predict", "--format onnx", "https://nihcc.app.box.com/v/ChestXray-NIHCC", "ChestX-ray8",
               "(unit: patient)", "| test | 310 | 15 |"):
    checks.check(needed in body, f"body: {needed}")

# Regenerated by `vitpipe card` from the run's files: the same bytes.
original = open(readme).read()
os.remove(readme)
e2e.run("card", model)
checks.check(open(readme).read() == original, "vitpipe card MODEL_DIR reproduces the card train wrote")

# A hand-written README is not replaced without --force.
mine = "# My notes\n\nHand-written.\n"
open(readme, "w").write(mine)
refused = e2e.run("card", model, expect_ok=False)
checks.check(refused.returncode == 1 and "--force" in refused.stderr and refused.stderr.count("\n") == 1 and
             open(readme).read() == mine, "card: a hand-written README.md is refused, one line, unchanged",
             refused.stderr.strip())
exported = os.path.join(root, "exported")
os.makedirs(exported)
open(os.path.join(exported, "README.md"), "w").write(mine)
refused = e2e.run("export", run, "--out", exported, expect_ok=False)
checks.check(refused.returncode == 1 and "--force" in refused.stderr and
             not os.path.exists(os.path.join(exported, "config.json")),
             "export: refused before writing anything over a hand-written README.md", refused.stderr.strip())
e2e.run("card", model, "--force")
checks.check(open(readme).read() == original, "card --force replaces it with the card")

# Bad input: one line naming what is wrong, exit 1.
for args, says in (((os.path.join(root, "nowhere"),), "is not a directory"),
                   ((model, "--run", init), "is not a training run (no metrics.jsonl)")):
    bad = e2e.run("card", *args, expect_ok=False)
    checks.check(bad.returncode == 1 and bad.stderr.count("\n") == 1 and says in bad.stderr,
                 f"card {' '.join(map(os.path.basename, args))}: one line, exit 1", bad.stderr.strip())

# A moved run: the card of its model/ is regenerated from the run beside it (the one it named is gone).
moved = os.path.join(root, "moved")
shutil.copytree(run, os.path.join(root, "to-move"))
os.remove(os.path.join(root, "to-move", "model", "README.md"))  # the copy's card names the original run
e2e.run("card", os.path.join(root, "to-move", "model"))
os.rename(os.path.join(root, "to-move"), moved)
e2e.run("card", os.path.join(moved, "model"))
meta_m, _ = front_matter(os.path.join(moved, "model", "README.md"))
checks.check(meta_m["model-index"][0]["results"] == meta["model-index"][0]["results"] and
             moved in open(os.path.join(moved, "model", "README.md")).read(),
             "a moved run's card is regenerated from the run beside its model/")
shutil.rmtree(moved)

# An export of the evaluated checkpoint keeps the run's numbers; one of other weights withholds them.
thresholds = json.load(open(os.path.join(run, "thresholds.json")))
checkpoints = sorted(d for d in os.listdir(os.path.join(run, "checkpoints")) if d.startswith("step-"))
for name in checkpoints:
    out = os.path.join(root, "export-" + name)
    e2e.run("export", os.path.join(run, "checkpoints", name), "--out", out)
    meta_x, body_x = front_matter(os.path.join(out, "README.md"))
    evaluated = int(name[len("step-"):]) == thresholds["step"]
    checks.check(("model-index" in meta_x) == evaluated and ("Not evaluated: these weights are step" in body_x) !=
                 evaluated, f"export of {name} (evaluated step {thresholds['step']}): results "
                 f"{'kept' if evaluated else 'withheld'}")
    checks.check(meta_x.get("license") == "apache-2.0", f"export of {name}: the run's license carries over")
checks.check(len(checkpoints) >= 2, "two checkpoints to compare", f"{checkpoints}")

# Nothing evaluated: a run without val or test, and a model with no run.
quiet = os.path.join(root, "quiet")
e2e.run(*e2e.train_args(init, data, quiet, "--max-steps", "2", "--batch-size", "32", "--val-fraction", "0"))
for directory, what in ((os.path.join(quiet, "model"), "a run that evaluated nothing"), (init, "a model with no run")):
    if directory == init:
        e2e.run("card", init)
    meta_n, body_n = front_matter(os.path.join(directory, "README.md"))
    checks.check("model-index" not in meta_n and "metrics" not in meta_n and "license" not in meta_n,
                 f"{what}: no model-index, metrics or license", f"{sorted(meta_n)}")
    checks.check("Not evaluated" in body_n and "| **mean**" not in body_n, f"{what}: says not evaluated")

# A base model from the Hub (an offline cache holding its card): base_model and its license; a LoRA run's adapter/
# gets a peft card naming the same base.
commit = "0123456789abcdef0123456789abcdef01234567"
snapshot = os.path.join(root, "hub", "models--acme--vit-micro-cxr", "snapshots", commit)
shutil.copytree(init, snapshot)
os.remove(os.path.join(snapshot, "README.md"))  # the card `vitpipe card init` wrote above
open(os.path.join(snapshot, "README.md"), "w").write("---\nlicense: mit\ntags:\n- vision\n---\n# The base\n")
os.makedirs(os.path.join(root, "hub", "models--acme--vit-micro-cxr", "refs"))
open(os.path.join(root, "hub", "models--acme--vit-micro-cxr", "refs", "main"), "w").write(commit)
env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=os.path.join(root, "hub"))
lora = os.path.join(root, "lora")
e2e.run(*e2e.train_args("acme/vit-micro-cxr", data, lora, "--max-steps", "4", "--batch-size", "32", "--lora", "4",
                        "--export-adapter"), env=env)
for directory, library in (("model", "transformers"), ("adapter", "peft")):
    meta_h, body_h = front_matter(os.path.join(lora, directory, "README.md"))
    checks.check(meta_h.get("base_model") == "acme/vit-micro-cxr" and meta_h.get("library_name") == library,
                 f"{directory}/: base_model is the Hub repo, library_name {library}", f"{meta_h}")
    checks.check(meta_h.get("license") == "mit" and "from the base model's card" in body_h,
                 f"{directory}/: the license the base model's card declares", f"{meta_h.get('license')}")
# `export --adapter` of that run's checkpoint: a card in both directories, the base named in each.
e2e.run("export", lora, "--out", os.path.join(root, "lora-merged"), "--adapter", os.path.join(root, "lora-adapter"),
        env=env)
for directory, library in (("lora-merged", "transformers"), ("lora-adapter", "peft")):
    meta_e, _ = front_matter(os.path.join(root, directory, "README.md"))
    checks.check(meta_e.get("base_model") == "acme/vit-micro-cxr" and meta_e.get("library_name") == library,
                 f"export --adapter: {directory}/ card, library_name {library}", f"{meta_e}")

e2e.cleanup(root)
checks.finish()
