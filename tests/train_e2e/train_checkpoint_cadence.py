"""How often `vitpipe train` checkpoints (one process, 160 steps of 8 a epoch, a few seconds):
- with no interval given, by time (--checkpoint-minutes, default 30): a short run writes only its final checkpoint,
  not one per epoch;
- --checkpoint-minutes 0.001 (0.06 s of work): several checkpoints in between, not tied to epoch ends;
- --checkpoint-every 16 keeps meaning steps: a checkpoint at each multiple of 16, and no other."""
import os
import re

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("checkpoint_cadence")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 64, "val": 8}, seed=5)
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "2", "--out", init)
common = ["--epochs", "20", "--batch-size", "8", "--micro-batch-size", "4", "--threads", "1", "--log-every", "0",
          "--export-last"]


def checkpoint_steps(name, *extra):
    out = os.path.join(root, name)
    result = e2e.run(*e2e.train_args(init, "csv:" + csv, out, *common, *extra))
    return [int(step) for step in re.findall(r"checkpoint: \S*/step-(\d+)", result.stderr)]


steps = checkpoint_steps("default")
checks.check(steps == [160], "no interval given: a short run checkpoints only at its end (not each epoch)", steps)
steps = checkpoint_steps("minutes", "--checkpoint-minutes", "0.001")
checks.check(len(steps) >= 3 and steps[-1] == 160 and steps == sorted(set(steps)) and
             any(step % 8 != 0 for step in steps[:-1]),
             "--checkpoint-minutes 0.001: checkpoints every 0.06 s of work, wherever the step falls", steps)
steps = checkpoint_steps("every", "--checkpoint-every", "16")
checks.check(steps == list(range(16, 161, 16)), "--checkpoint-every 16: at each multiple of 16 steps only", steps)
e2e.cleanup(root)
checks.finish()
