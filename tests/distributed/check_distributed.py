"""`vitpipe train` under real mpirun: pipeline stages x data-parallel replicas against one process.

    check_distributed.py --work DIR --mpiexec MPIRUN --probe REPLICA_ITEMS CASE

Cases (each one ctest test; `setup` is their fixture, it writes the models and the single-process references):
  setup                    vit-mini (4 layers, 32 px) and vit-micro (2 layers); reference runs in one process
  equal.<layout>           final weights of an mpirun job == the single-process run on the same global batch
  equal.masked-stages2x2   the same with masked labels (blank and -1 cells of a csv, --blank ignore)
  equal.interleaved2-24-micro-batches  interleaved 1F1B, 2 ranks, 24 micro-batches of 1 (once a deadlock)
  refuse.<what>            a bad layout refused before any work, with a message saying what to change
  fail.rank-raises         a corrupted image that only rank 2 loads: the job ends within seconds, reason shown
  fail.rank-killed         SIGKILL to rank 3 mid-training: mpirun exits non-zero within 10 s
  resume.<from>-to-<to>    a checkpoint of one layout resumed under another reaches the uninterrupted weights
  trace                    --trace: valid Chrome trace JSON with every rank's compute and communication events
  sharded.<layout>         --shard-optimizer (AdamW, LAMB, clipping on) == one process with the same optimizer
  layout-auto.ranks<N>     --layout auto: the chosen layout's weights == one process; predicted vs measured printed
  layout-auto.predicted-vs-measured  --layout auto on 2 ranks: measured step time within a factor 8 of predicted
                           in one of two runs (prints the ratios; a bound against gross errors only, see
                           TIMING_FACTOR)
  plan.<what>              `vitpipe plan`: a layout for 4 processes (cached profile reused, layout flags fix the
                           search), under mpirun, and a memory no layout fits refused saying what would fit
  families.<model>-<mode>  zb-h1 == 1F1B (2 stages, mpirun) on DINOv2 with registers + SwiGLU + LayerScale and on
                           DeiT with its distillation token and teacher head, fully trained, with LoRA, with frozen
                           layers or a frozen backbone (frozen weights checked bit for bit)
  sharded-lora.stages2x2-zb-h1  --shard-optimizer + --lora under 2 stages x 2 replicas zb-h1 == one unsharded
                           process: the shards hold the trainable elements only, the frozen weights never move
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_numpy import read_safetensors  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
from e2e_common import rank_pids  # noqa: E402

VITPIPE = os.environ["VITPIPE"]
SAMPLE = os.path.join(os.environ["VITPIPE_SOURCE_DIR"], "data", "chestxray14-sample")
TOLERANCE = 1e-4  # relative, per tensor: max |a - b| / max |a|

# One global batch of 8 = micro-batch 2 x (4 / replicas) micro-batches x replicas, in every layout below.
COMMON = ["--micro-batch-size", "2", "--schedule", "constant", "--warmup-steps", "0", "--val-fraction", "0",
          "--seed", "5", "--log-every", "1"]
THREADS = ["--threads", "1"]
BATCH = ["--batch-size", "8"]
# SGD moves each weight by lr x its gradient, so a wrong gradient shows in the weights (Adam's first steps move
# every weight by about lr whatever the gradient's size). Gradient clipping (default 1.0) stays on: it needs the
# global norm across stages.
SGD = ["--optimizer", "sgd", "--lr", "2"]
STEPS = ["--max-steps", "3"]
ADAMW = ["--optimizer", "adamw", "--lr", "1e-3"]  # the resume tests: the moments must travel too

LAYOUTS = {  # name: (processes, extra flags)
    "stages2": (2, ["--pipeline-stages", "2"]),
    "replicas2": (2, []),
    "stages2x2-1f1b": (4, ["--pipeline-stages", "2", "--pipeline-schedule", "1f1b"]),
    "stages4-gpipe-recompute": (4, ["--pipeline-stages", "4", "--pipeline-schedule", "gpipe", "--recompute"]),
    "interleaved2": (2, ["--pipeline-stages", "2", "--pipeline-schedule", "interleaved", "--virtual-stages", "2"]),
    "interleaved2x2-recompute": (4, ["--pipeline-stages", "2", "--pipeline-schedule", "interleaved",
                                     "--virtual-stages", "2", "--recompute"]),
    "threads-stages2": (0, ["--pipeline-stages", "2"]),  # no mpirun: the stages run as threads of one process
    # ZB-H1: the backward split into input and weight passes, the weight passes deferred into the bubbles.
    "zb-h1-stages2": (2, ["--pipeline-stages", "2", "--pipeline-schedule", "zb-h1"]),
    "zb-h1-stages4": (4, ["--pipeline-stages", "4", "--pipeline-schedule", "zb-h1"]),
    "zb-h1-stages2x2": (4, ["--pipeline-stages", "2", "--pipeline-schedule", "zb-h1"]),
}

# --shard-optimizer (ZeRO-1) with AdamW and LAMB, gradient clipping that does clip (the gradient norms of these
# runs are well above 0.05): against one process with the same optimizer. name: (processes, optimizer, flags)
SHARDED = {
    "adamw-replicas2": (2, "adamw", []),
    "adamw-replicas4": (4, "adamw", []),
    "lamb-replicas2": (2, "lamb", []),
    "lamb-replicas4": (4, "lamb", []),
    "lamb-stages2x2-zb-h1": (4, "lamb", ["--pipeline-stages", "2", "--pipeline-schedule", "zb-h1"]),
    "adamw-stages2x2-interleaved": (4, "adamw", ["--pipeline-stages", "2", "--pipeline-schedule", "interleaved",
                                                 "--virtual-stages", "2"]),
}
CLIP = ["--clip-grad-norm", "0.05"]
# LAMB's step is lr x the trust ratio: at AdamW's 1e-3 the weights would move too little for the comparison to mean much.
SHARDED_LR = {"adamw": "1e-3", "lamb": "1e-2"}


# The families' checkpoints, written the way save_pretrained writes them (tests/predict's writers, not vitpipe's).
FAMILY_MODELS = {  # name: (model_type, architecture, options)
    "dinov2": ("dinov2_with_registers", "Dinov2WithRegistersForImageClassification", {"swiglu": True, "registers": 2}),
    "deit": ("deit", "DeiTForImageClassificationWithTeacher", {"mlp": 128}),
}
LORA_ALL = ["--lora", "4", "--lora-alpha", "8", "--lora-targets", "query,key,value,projection,fc1,fc2"]
FAMILIES = {  # name: (model, trainable-set flags)
    "dinov2-full": ("dinov2", []),
    "dinov2-lora": ("dinov2", LORA_ALL),
    "dinov2-freeze-layers1": ("dinov2", ["--freeze-layers", "1"]),
    "deit-full": ("deit", []),
    "deit-freeze-backbone": ("deit", ["--freeze", "backbone"]),
    "deit-lora": ("deit", ["--lora", "2", "--lora-targets", "query,value,fc2"]),
}
FAMILY_SGD = ["--optimizer", "sgd", "--lr", "0.5"]


class Job:
    def __init__(self, args):
        self.work = args.work
        self.shared = os.path.join(args.work, "shared")
        self.mpiexec = args.mpiexec
        self.probe = args.probe
        self.env = dict(os.environ)
        self.env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                         "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1",
                         "OMPI_MCA_mpi_yield_when_idle": "1"})

    def model(self, name):
        return os.path.join(self.shared, name)

    def mpirun(self, processes):
        return [self.mpiexec, "--oversubscribe", "--allow-run-as-root", "-np", str(processes)]

    def run(self, command, expect_ok=True, timeout=120):
        start = time.monotonic()
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout)
        result.seconds = time.monotonic() - start
        if expect_ok and result.returncode != 0:
            print(result.stdout + result.stderr)
            sys.exit(f"FAIL: exit status {result.returncode}: {' '.join(command)}")
        return result

    def train(self, processes, flags, expect_ok=True, timeout=120):
        command = ([] if processes == 0 else self.mpirun(processes)) + [VITPIPE, "train"] + flags
        print("$", " ".join(command), flush=True)
        return self.run(command, expect_ok, timeout)


def data_flag(root=SAMPLE):
    return ["--data", "chestxray14:" + root]


def compare(initial_path, expected_path, actual_path, what, min_moved=10 * TOLERANCE):
    """Every tensor within TOLERANCE of the reference, and the run must have moved the weights well beyond it."""
    initial, expected, actual = (read_safetensors(p) for p in (initial_path, expected_path, actual_path))
    assert expected.keys() == actual.keys(), f"{what}: tensor names differ"
    import numpy as np
    worst, worst_name, least_moved = 0.0, "", float("inf")
    for name, reference in expected.items():
        scale = max(np.abs(reference).max(), 1e-30)
        error = np.abs(actual[name] - reference).max() / scale
        if error > worst:
            worst, worst_name = error, name
        moved = np.abs(reference - initial[name]).max() / scale
        if moved > 0:
            least_moved = min(least_moved, moved)
    print(f"{what}: worst relative difference {worst:.2e} ({worst_name or '-'}); every moving tensor moved by at "
          f"least {least_moved:.2e} of its scale")
    if worst > TOLERANCE:
        sys.exit(f"FAIL: {what}: {worst_name} differs by {worst:.2e} relative (tolerance {TOLERANCE})")
    if least_moved < min_moved:
        sys.exit(f"FAIL: {what}: the weights moved too little ({least_moved:.2e}) for the comparison to mean much")


FINDINGS = ["Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Effusion", "Emphysema", "Fibrosis", "Hernia",
            "Infiltration", "Mass", "Nodule", "Pleural_Thickening", "Pneumonia", "Pneumothorax"]


def write_masked_csv(path):
    """The sample as csv: with one column per finding, about 30% of the cells blank and 10% uncertain (-1), so that
    --blank ignore masks a different share of every replica's micro-batches."""
    import csv
    import random
    generator = random.Random(5)
    with open(os.path.join(SAMPLE, "Data_Entry_2017_v2020.csv")) as f:
        records = list(csv.DictReader(f))
    with open(path, "w") as f:
        f.write("path,patient," + ",".join(FINDINGS) + "\n")
        for r in records:
            found = set(r["Finding Labels"].split("|"))
            cells = []
            for name in FINDINGS:
                draw = generator.random()
                cells.append("" if draw < 0.3 else "-1" if draw < 0.4 else "1" if name in found else "0")
            f.write(os.path.join(SAMPLE, "images", r["Image Index"]) + "," + r["Patient ID"] + "," + ",".join(cells) +
                    "\n")


def masked_flags(job):
    return ["--data", "csv:" + os.path.join(job.shared, "masked.csv"), "--blank", "ignore"]


def case_setup(job):
    shutil.rmtree(job.shared, ignore_errors=True)
    os.makedirs(job.shared)
    job.run([VITPIPE, "init", "--preset", "vit-mini", "--image-size", "32", "--seed", "2", "--out", job.model("mini")])
    job.run([VITPIPE, "init", "--preset", "vit-micro", "--seed", "1", "--out", job.model("micro")])
    mini = ["--model", job.model("mini")] + data_flag() + COMMON + THREADS + BATCH
    job.train(0, mini + SGD + STEPS + ["--output-dir", job.model("reference-sgd")])
    job.train(0, mini + ADAMW + ["--max-steps", "4", "--output-dir", job.model("reference-adamw")])
    for optimizer in ("adamw", "lamb"):
        job.train(0, mini + ["--optimizer", optimizer, "--lr", SHARDED_LR[optimizer]] + CLIP + STEPS +
                  ["--output-dir", job.model(f"reference-{optimizer}-clipped")])
    write_masked_csv(os.path.join(job.shared, "masked.csv"))
    job.train(0, ["--model", job.model("mini")] + masked_flags(job) + COMMON + THREADS + BATCH + SGD + STEPS +
              ["--output-dir", job.model("reference-masked")])


def case_equal_masked(job):
    """Masked labels: the loss is the mean over the known labels of the whole global batch, so 2 stages x 2
    replicas (each replica's micro-batches knowing different shares of their labels) equal one process."""
    out = os.path.join(job.work, "equal.masked-stages2x2")
    shutil.rmtree(out, ignore_errors=True)
    log = job.train(4, ["--model", job.model("mini")] + masked_flags(job) + COMMON + BATCH + SGD + STEPS + THREADS +
                    ["--pipeline-stages", "2", "--output-dir", out]).stderr
    assert "4 MPI ranks" in log and "training labels are unknown" in log, log
    compare(os.path.join(job.model("mini"), "model.safetensors"),
            os.path.join(job.model("reference-masked"), "model", "model.safetensors"),
            os.path.join(out, "model", "model.safetensors"), "masked labels, 4 MPI ranks = 2 stages x 2 replicas")


# Many micro-batches of one image: interleaved 1F1B on 2 ranks once deadlocked from 24 micro-batches up (a slot
# waited for its send, which the peer could not yet receive). 24 here, against one process on the same batch.
MANY_MICRO_BATCHES = ["--micro-batch-size", "1", "--batch-size", "24", "--schedule", "constant", "--warmup-steps", "0",
                      "--val-fraction", "0", "--seed", "5", "--log-every", "1", "--max-steps", "2"]


def case_equal_many_micro_batches(job):
    out = os.path.join(job.work, "equal.interleaved2-24-micro-batches")
    reference = os.path.join(job.work, "equal.interleaved2-24-micro-batches.reference")
    for folder in (out, reference):
        shutil.rmtree(folder, ignore_errors=True)
    common = ["--model", job.model("mini")] + data_flag() + MANY_MICRO_BATCHES + THREADS + SGD
    job.train(0, common + ["--output-dir", reference])
    log = job.train(2, common + ["--pipeline-stages", "2", "--pipeline-schedule", "interleaved", "--virtual-stages",
                                 "2", "--output-dir", out], timeout=60).stderr
    assert "2 MPI ranks" in log, log
    compare(os.path.join(job.model("mini"), "model.safetensors"),
            os.path.join(reference, "model", "model.safetensors"), os.path.join(out, "model", "model.safetensors"),
            "2 MPI ranks, interleaved 1F1B (v = 2), 24 micro-batches of 1")


def case_equal(job, layout):
    processes, flags = LAYOUTS[layout]
    out = os.path.join(job.work, "equal." + layout)
    shutil.rmtree(out, ignore_errors=True)
    # One layout runs with the default --threads (0: all cores): under mpirun that must mean this rank's share.
    default_threads = layout == "stages2x2-1f1b"
    threads = [] if default_threads else THREADS
    result = job.train(processes, ["--model", job.model("mini")] + data_flag() + COMMON + BATCH + SGD + STEPS +
                       threads + flags + ["--output-dir", out])
    log = result.stderr
    if processes:
        assert f"{processes} MPI ranks" in log, "the job did not run as MPI ranks:\n" + log
    else:
        assert "2 rank(s) in this process" in log, "the stages did not run as threads:\n" + log
    if default_threads:
        share = max(1, (os.cpu_count() or 1) // processes)
        used = int(log.split(" CPU thread(s) per rank")[0].rsplit(" ", 1)[1])
        print(f"--threads 0 under mpirun: {used} thread(s) per rank, {os.cpu_count()} cores, {processes} ranks")
        if used > share:
            sys.exit(f"FAIL: {processes} ranks on {os.cpu_count()} cores each use {used} threads (oversubscribed)")
    compare(os.path.join(job.model("mini"), "model.safetensors"),
            os.path.join(job.model("reference-sgd"), "model", "model.safetensors"),
            os.path.join(out, "model", "model.safetensors"),
            f"{processes} MPI ranks {' '.join(flags)}" if processes else f"one process, {' '.join(flags)}")
    for line in log.splitlines():
        if "pipeline bubble" in line:
            print(line)


def case_sharded(job, name):
    processes, optimizer, flags = SHARDED[name]
    out = os.path.join(job.work, "sharded." + name)
    shutil.rmtree(out, ignore_errors=True)
    result = job.train(processes, ["--model", job.model("mini")] + data_flag() + COMMON + THREADS + BATCH +
                       ["--optimizer", optimizer, "--lr", SHARDED_LR[optimizer]] + CLIP + STEPS + flags +
                       ["--shard-optimizer", "--output-dir", out])
    log = result.stderr
    assert f"{processes} MPI ranks" in log, "the job did not run as MPI ranks:\n" + log
    replicas = processes // (2 if "--pipeline-stages" in flags else 1)
    assert f"sharded across {replicas} replica(s)" in log, "the optimizer was not sharded:\n" + log
    for line in log.splitlines():
        if "optimizer state per rank" in line or "communication per step" in line:
            print(line)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    norms = [r["grad_norm"] for r in records if r.get("type") == "train"]
    print(f"gradient norms before clipping: {norms}")
    if min(norms) <= 0.05:
        sys.exit("FAIL: clipping at 0.05 did not clip every step; the test would not exercise it")
    scattered = [r["comm"]["reduce_scatter_bytes"] for r in records if r.get("type") == "train"]
    gathered = [r["comm"]["allgather_bytes"] for r in records if r.get("type") == "train"]
    if not all(b > 0 for b in scattered) or gathered[0] != 0 or not all(b > 0 for b in gathered[1:]):
        sys.exit(f"FAIL: reduce-scatter bytes {scattered}, all-gather bytes {gathered} (every step reduce-scatters, "
                 "every step after the first all-gathers)")
    compare(os.path.join(job.model("mini"), "model.safetensors"),
            os.path.join(job.model(f"reference-{optimizer}-clipped"), "model", "model.safetensors"),
            os.path.join(out, "model", "model.safetensors"), f"{processes} MPI ranks, {optimizer}, sharded, "
            + " ".join(flags))


def family_model(job, name):
    """A small checkpoint of the family (4 blocks, 14 findings), written once per test directory (cases run in
    parallel: written aside, then renamed into place)."""
    import tempfile
    directory = os.path.join(job.work, "family-" + name)
    if os.path.exists(os.path.join(directory, "model.safetensors")):
        return directory
    os.makedirs(job.work, exist_ok=True)
    aside = os.path.join(tempfile.mkdtemp(dir=job.work), "model")
    sys.path.insert(0, os.path.join(os.environ["VITPIPE_SOURCE_DIR"], "tests", "predict"))
    import predict_families as pf
    import predict_golden as pg
    model_type, architecture, options = FAMILY_MODELS[name]
    if model_type == "deit":
        config = pf.family_config(model_type, 64, 4, 4, 32, 8, FINDINGS, architecture, **options)
        processor = pf.deit_processor(36, 32)
    else:  # a 6 x 6 position grid fed 4 x 4, as dinov2-micro
        config = pf.family_config(model_type, 64, 4, 4, 42, 7, FINDINGS, architecture, **options)
        processor = pf.bit_processor(32, 28, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    pg.write_model(aside, config, pf.family_state_dict(config, seed=11), processor)
    try:
        os.rename(aside, directory)
    except OSError:  # another case wrote it first (the same bytes)
        shutil.rmtree(os.path.dirname(aside))
    return directory


LORA_MERGED = {  # a LoRA target: the exported weights (within an encoder layer) it merges into
    "query": {"attention.attention.query.weight"}, "key": {"attention.attention.key.weight"},
    "value": {"attention.attention.value.weight"}, "projection": {"attention.output.dense.weight"},
    "fc1": {"intermediate.dense.weight", "mlp.fc1.weight", "mlp.weights_in.weight"},
    "fc2": {"output.dense.weight", "mlp.fc2.weight", "mlp.weights_out.weight"},
}
CLASSIFIERS = ("classifier.", "cls_classifier.", "distillation_classifier.")


def frozen_unchanged(initial_path, exported_path, flags):
    """Names of exported tensors the trainable set freezes that are not bit for bit as loaded (should be none).
    --freeze backbone trains the classifiers alone; --freeze-layers 1 freezes the embeddings and block 0; LoRA freezes
    everything but the classifiers and the weights its adapters merge into."""
    import numpy as np
    initial, exported = read_safetensors(initial_path), read_safetensors(exported_path)
    merged = set()
    if "--lora" in flags:
        for target in flags[flags.index("--lora-targets") + 1].split(","):
            merged |= LORA_MERGED[target]
    moved = []
    for name, before in initial.items():
        local = name.split(".encoder.layer.", 1)[1].split(".", 1)[1] if ".encoder.layer." in name else None
        if "--freeze" in flags:
            frozen = not name.startswith(CLASSIFIERS)
        elif "--freeze-layers" in flags:
            frozen = ".embeddings." in name or ".encoder.layer.0." in name
        elif "--lora" in flags:
            frozen = not name.startswith(CLASSIFIERS) and local not in merged
        else:
            frozen = False
        if frozen and (name not in exported or not np.array_equal(before, exported[name])):
            moved.append(name)
    return moved


def case_families(job, name):
    """zb-h1's split backward (W deferred into the bubbles) gives 1F1B's weights on the model families and
    trainable sets, 2 stages under mpirun; the frozen weights stay bit for bit as loaded."""
    model_name, flags = FAMILIES[name]
    model = family_model(job, model_name)
    outputs, checkpoints = {}, {}
    for schedule in ("1f1b", "zb-h1"):
        out = os.path.join(job.work, f"families.{name}.{schedule}")
        shutil.rmtree(out, ignore_errors=True)
        log = job.train(2, ["--model", model] + data_flag() + COMMON + THREADS + BATCH + FAMILY_SGD + STEPS + flags +
                        ["--checkpoint-every", "3", "--pipeline-stages", "2", "--pipeline-schedule", schedule,
                         "--output-dir", out]).stderr
        assert "2 MPI ranks" in log and f"schedule {schedule}" in log, log
        outputs[schedule] = os.path.join(out, "model", "model.safetensors")
        checkpoints[schedule] = latest_checkpoint(out)
        moved = frozen_unchanged(os.path.join(model, "model.safetensors"), outputs[schedule], flags)
        if moved:
            sys.exit(f"FAIL: {schedule} {' '.join(flags)}: frozen tensors changed: {moved[:5]}")
    initial = os.path.join(model, "model.safetensors")
    if "--lora" in flags:
        # The merged export moves by (alpha / r) B A only, little beside W: the adapters themselves are compared
        # (B starts at zero: all it holds is what training moved).
        compare(initial, outputs["1f1b"], outputs["zb-h1"], f"{name}: zb-h1 vs 1f1b, merged export", min_moved=0)
        compare_adapters(*(os.path.join(checkpoints[s], "trainable.safetensors") for s in ("1f1b", "zb-h1")),
                         f"{name}: zb-h1 vs 1f1b, checkpoint")
    else:
        compare(initial, outputs["1f1b"], outputs["zb-h1"], f"{name}: zb-h1 vs 1f1b, 2 stages")


def latest_checkpoint(out):
    with open(os.path.join(out, "checkpoints", "latest")) as f:
        return os.path.join(out, "checkpoints", f.read().strip())


def compare_adapters(expected_path, actual_path, what):
    """A LoRA checkpoint's trainable tensors (A, B, classifiers) within TOLERANCE; every B trained (peft starts it
    at zero, so what it holds is what training moved)."""
    import numpy as np
    expected, actual = read_safetensors(expected_path), read_safetensors(actual_path)
    assert expected.keys() == actual.keys(), f"{what}: the checkpoints hold different tensors"
    worst, worst_name = 0.0, ""
    for k in expected:
        error = np.abs(actual[k] - expected[k]).max() / max(np.abs(expected[k]).max(), 1e-30)
        if error > worst:
            worst, worst_name = error, k
    untrained = [k for k in expected if "lora_B" in k and not np.abs(expected[k]).max() > 0]
    print(f"{what}: {len(expected)} trainable tensors (LoRA A/B, classifiers), worst relative difference {worst:.2e} "
          f"({worst_name or '-'}), {sum('lora_B' in k for k in expected)} B matrices all moved from zero")
    if worst > TOLERANCE or untrained or not any("lora_B" in k for k in expected):
        sys.exit(f"FAIL: {what}: {worst_name} differs by {worst:.2e} (tolerance {TOLERANCE}); B still zero or "
                 f"missing: {untrained[:3]}")


def read_bytes(text):
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}[unit]


def case_sharded_lora(job):
    """--shard-optimizer with LoRA (2 stages x 2 replicas, zb-h1, AdamW): the moments are sharded over the trainable
    parameters only (per rank about half of the unsharded trainable state; the checkpoint's optimizer state holds
    exactly the trainable elements), the result is one unsharded process's, and the frozen weights never move."""
    import numpy as np
    model = family_model(job, "dinov2")
    lora = ["--lora", "4", "--lora-alpha", "8", "--lora-targets", "query,value,fc2"]
    flags = ["--model", model] + data_flag() + COMMON + THREADS + BATCH + ADAMW + STEPS + lora + \
        ["--checkpoint-every", "3", "--export-last"]
    reference = os.path.join(job.work, "sharded-lora.reference")
    out = os.path.join(job.work, "sharded-lora.stages2x2-zb-h1")
    for d in (reference, out):
        shutil.rmtree(d, ignore_errors=True)
    job.train(0, flags + ["--output-dir", reference])
    log = job.train(4, flags + ["--pipeline-stages", "2", "--pipeline-schedule", "zb-h1", "--shard-optimizer",
                                "--output-dir", out]).stderr
    training = [line for line in log.splitlines() if "trainable parameters of" in line]
    state = [line for line in log.splitlines() if "optimizer state per rank" in line]
    print("\n".join(training + state))
    assert training and state and "sharded across 2 replica(s)" in state[0], log
    trainable = int(training[0].split(" trainable parameters of")[0].rsplit(" ", 1)[1])
    per_rank = read_bytes(state[0].split("(most on any rank): ")[1].split(",")[0])
    unsharded = read_bytes(state[0].split("(unsharded: ")[1].rstrip(")"))
    # AdamW: two moments of 4 bytes per trainable element (the frozen ones have none); sharded, a rank holds part of
    # its stage's (shards are whole 8192-element update chunks, so not half of a model this small).
    if unsharded > 2 * 4 * trainable * 1.01 or not per_rank < unsharded:
        sys.exit(f"FAIL: optimizer state per rank {per_rank:.0f} B of unsharded {unsharded:.0f} B; the model has "
                 f"{trainable} trainable parameters (2 moments of 4 bytes each at most {8 * trainable} B)")

    latest = latest_checkpoint
    sharded_state = read_safetensors(os.path.join(latest(out), "optimizer.safetensors"))
    reference_state = read_safetensors(os.path.join(latest(reference), "optimizer.safetensors"))
    sizes = sum(t.size for t in sharded_state.values())
    if sizes != 2 * trainable:
        sys.exit(f"FAIL: the sharded run's optimizer state holds {sizes} elements, not 2 x {trainable} trainable")
    for name, expected in reference_state.items():
        error = np.abs(sharded_state[name] - expected).max() / max(np.abs(expected).max(), 1e-30)
        print(f"optimizer state {name}: {expected.size} elements, worst relative difference {error:.2e}")
        if error > TOLERANCE:
            sys.exit(f"FAIL: optimizer state {name} differs by {error:.2e} relative")
    held = read_safetensors(os.path.join(latest(out), "trainable.safetensors"))
    if sum(t.size for t in held.values()) != trainable:
        sys.exit("FAIL: the checkpoint's trainable.safetensors does not hold exactly the trainable parameters")
    compare_adapters(os.path.join(latest(reference), "trainable.safetensors"),
                     os.path.join(latest(out), "trainable.safetensors"), "sharded LoRA vs one unsharded process")
    moved = frozen_unchanged(os.path.join(model, "model.safetensors"), os.path.join(out, "model", "model.safetensors"),
                             lora)
    if moved:
        sys.exit(f"FAIL: frozen tensors changed under --shard-optimizer --lora: {moved[:5]}")


def case_layout_auto(job, processes):
    """--layout auto under mpirun: the planner picks any layout; the weights must still be one process's."""
    out = os.path.join(job.work, f"layout-auto.ranks{processes}")
    shutil.rmtree(out, ignore_errors=True)
    cache = os.path.join(job.work, "layout-auto-profiles")
    result = job.train(processes, ["--model", job.model("mini")] + data_flag() + COMMON[2:] + THREADS + BATCH + SGD +
                       STEPS +
                       ["--layout", "auto", "--link", "10Gbit,20us", "--memory-per-process", "2GiB",
                        "--profile-cache", cache, "--output-dir", out])
    log = result.stderr
    chosen = [line for line in log.splitlines() if "--layout auto chose" in line]
    report = [line for line in log.splitlines() if "--layout auto: predicted" in line]
    print("\n".join(chosen + report))
    if not chosen or not report:
        sys.exit("FAIL: no chosen layout or no predicted-vs-measured report:\n" + log)
    if not any(name.startswith("profile-") for name in os.listdir(cache)):
        sys.exit(f"FAIL: no profile cached in {cache}")
    compare(os.path.join(job.model("mini"), "model.safetensors"),
            os.path.join(job.model("reference-sgd"), "model", "model.safetensors"),
            os.path.join(out, "model", "model.safetensors"), f"{processes} MPI ranks, --layout auto")
    with open(os.path.join(out, "train_options.json")) as f:
        saved = json.load(f)
    if saved["layout"] != "auto" or saved["pipeline_stages"] is not None:
        sys.exit("FAIL: train_options.json must say layout auto and leave the chosen layout to the planner")


# Predicted vs measured step time of --layout auto within this factor either way: a bound against gross errors
# (units, a missing pass, a profile of the wrong model), not the accuracy the README reports. vit-mini's steps take
# tens of milliseconds, where per-message and per-micro-batch overheads the planner does not model dominate
# (measured / predicted 4.4 here, with a 2-stage interleaved layout); CI also runs other tests beside this one.
TIMING_FACTOR = 8.0
# Both sides of the ratio are measured in the same run, under the same load, so a busy host slows them alike; what it
# cannot cancel is load that changes between the profile and the steps (seconds apart). A ratio out of bounds is
# therefore measured once more from a fresh profile, and the test fails only when both runs are: an error of the
# planner's (units, a missing pass) is out of bounds every time. Nothing here is timed against the wall clock: the
# run's own wall time is mostly the profile (11-28 s on a loaded 2-core host, 107 s seen in CI under heavy load),
# hence TIMING_RUN_SECONDS per run and the test's TIMEOUT in tests.cmake with room for two.
TIMING_ATTEMPTS = 2
TIMING_RUN_SECONDS = 140


def measure_layout_auto_timing(job, out, cache):
    """One --layout auto run from a fresh profile: its metrics.jsonl records and its layout records."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    result = job.train(2, ["--model", job.model("mini")] + data_flag() + COMMON[2:] + THREADS + SGD +
                       ["--batch-size", "32", "--max-steps", "8", "--layout", "auto", "--memory-per-process", "2GiB",
                        "--profile-cache", cache, "--output-dir", out], timeout=TIMING_RUN_SECONDS)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    layout = [r for r in records if r.get("type") == "layout"]
    if not layout:
        sys.exit("FAIL: no layout record in metrics.jsonl:\n" + result.stderr)
    print("\n".join(line for line in result.stderr.splitlines() if "--layout auto" in line or "plan:" in line))
    print(f"run took {result.seconds:.1f} s", flush=True)
    return records, layout


def case_layout_auto_timing(job):
    """--layout auto on 2 ranks of 1 thread (no oversubscription), link and reduction measured by the run itself,
    profile measured by both ranks at once: the measured step time (median of the steps after the first) must be
    within TIMING_FACTOR of the predicted one (in one of TIMING_ATTEMPTS runs, see there)."""
    out = os.path.join(job.work, "layout-auto.predicted-vs-measured")
    cache = os.path.join(job.work, "layout-auto-timing-profiles")
    ratios = []
    for attempt in range(1, TIMING_ATTEMPTS + 1):
        records, layout = measure_layout_auto_timing(job, out, cache)
        predicted, measured = layout[-1]["predicted_step_seconds"], layout[-1]["measured_step_seconds"]
        ratios.append(measured / predicted)
        print(f"run {attempt}: predicted {predicted:.4f} s, measured {measured:.4f} s per step: measured / predicted = "
              f"{ratios[-1]:.2f} (allowed 1/{TIMING_FACTOR:g} .. {TIMING_FACTOR:g})", flush=True)
        if 1 / TIMING_FACTOR <= ratios[-1] <= TIMING_FACTOR:
            break
    else:
        sys.exit(f"FAIL: predicted and measured step times differ by more than the allowed factor in all "
                 f"{TIMING_ATTEMPTS} runs (measured / predicted: {', '.join(f'{r:.2f}' for r in ratios)})")
    # Bytes are exact: every step's count over the ranks must be the chosen layout's planned volume. The plan is the
    # steady state: with a sharded optimizer a step counts the parameter all-gather it waited for, which the first
    # step has none of (the weights start whole), so its count is the reduce-scatter alone.
    planned = layout[-1]["predicted_wire_bytes"]
    steps = [r["comm"] for r in records if r.get("type") == "train" and "comm" in r]
    if steps and steps[0]["reduce_scatter_bytes"] > 0:
        first = steps.pop(0)
        later = steps[0] if steps else {}
        if (first["allgather_bytes"] != 0 or first["reduce_scatter_bytes"] != later.get("reduce_scatter_bytes")
                or not first["wire_bytes"] < planned):
            sys.exit(f"FAIL: a sharded run's first step should be the later steps' reduce-scatter without an "
                     f"all-gather: {first} against {later}")
    counted = sorted({c["wire_bytes"] for c in steps})
    print(f"wire bytes per step: planned {planned:.0f}, counted {counted}")
    if not counted or any(abs(c - planned) > 1e-9 * planned + 1 for c in counted):
        sys.exit(f"FAIL: the chosen layout's planned bytes per step ({planned:.0f}) differ from vitpipe's count "
                 f"({counted})")


def plan(job, processes, flags, expect_ok=True):
    command = ([] if processes == 0 else job.mpirun(processes)) + [VITPIPE, "plan", "--model", job.model("mini"),
                                                                    "--batch-size", "8", "--link", "10Gbit,20us",
                                                                    "--profile-cache",
                                                                    os.path.join(job.work, "plan-profiles")] + flags
    print("$", " ".join(command), flush=True)
    return job.run(command, expect_ok, timeout=120)


def case_plan(job, name):
    if name == "mini-4-processes":
        first = json.loads(plan(job, 0, ["--processes", "4", "--json"]).stdout)
        again = json.loads(plan(job, 0, ["--processes", "4", "--json"]).stdout)
        chosen = first["layouts"][0]
        print(json.dumps({k: chosen[k] for k in ("stages", "replicas", "micro_batch", "micro_batches", "schedule",
                                                  "shard_optimizer", "layers_per_stage", "step_seconds")}))
        if chosen["stages"] * chosen["replicas"] != 4 or chosen["micro_batch"] * chosen["micro_batches"] * \
                chosen["replicas"] != 8:
            sys.exit("FAIL: the chosen layout does not use 4 processes on a global batch of 8")
        times = [layout["step_seconds"] for layout in first["layouts"]]
        if times != sorted(times) or not all(layout["fits"] for layout in first["layouts"]):
            sys.exit(f"FAIL: layouts not ranked fastest first, or one that does not fit listed: {times}")
        if not again.get("profile_measured") is False:
            sys.exit("FAIL: the second plan profiled again instead of reading the cache")
        if again["layouts"][0]["train_flags"] != chosen["train_flags"]:
            sys.exit("FAIL: the same inputs and cached profile chose another layout")
        text = plan(job, 0, ["--processes", "4", "--pipeline-stages", "2", "--pipeline-schedule", "1f1b"]).stdout
        print(text)
        if "chosen: 2 stage(s) x 2 replica(s)" not in text or "zb-h1" in text.split("chosen:")[1]:
            sys.exit("FAIL: --pipeline-stages 2 --pipeline-schedule 1f1b did not fix the stages and the schedule")
    elif name == "under-mpirun":
        text = plan(job, 2, []).stdout
        print(text)
        if "plan: 2 process(es)" not in text or "chosen:" not in text:
            sys.exit("FAIL: under mpirun -np 2 the plan is not for mpirun's 2 processes")
    elif name == "nothing-fits":
        result = plan(job, 0, ["--processes", "4", "--memory-per-process", "64MiB"], expect_ok=False)
        output = result.stdout + result.stderr
        print(output)
        lines = [line for line in output.splitlines() if line.strip()]
        if result.returncode != 1 or len(lines) != 1:
            sys.exit(f"FAIL: expected one line and exit status 1, got {result.returncode} and {len(lines)} lines")
        for expected in ("no layout of 4 process(es) fits 64.0 MiB per process (--memory-per-process)",
                         "the layout needing the least memory", "needs"):
            if expected not in output:
                sys.exit(f"FAIL: the message does not say {expected!r}")
    else:
        sys.exit(f"unknown plan case {name}")


REFUSALS = {  # name: (processes, model or None when the refusal must come before reading any, flags, message)
    "ranks-not-multiple-of-stages": (3, None, ["--pipeline-stages", "2", "--batch-size", "8"],
                                     "cannot arrange 3 processes into 2 pipeline stages"),
    "more-stages-than-pieces": (5, "micro", ["--pipeline-stages", "5", "--batch-size", "10"],
                                "allow at most 4 stages"),
    "fewer-micro-batches-than-stages": (2, None, ["--pipeline-stages", "2", "--batch-size", "2"],
                                        "1 micro-batches per step, fewer than the 2 pipeline stages"),
    "batch-not-divisible": (2, None, ["--batch-size", "6"],
                            "global batch size 6 is not divisible by micro-batch size 2 x 2 replicas"),
    "layout-auto-with-stages": (2, None, ["--layout", "auto", "--pipeline-stages", "2"],
                                "--layout auto chooses the pipeline stages"),
    "zb-h1-with-recompute": (2, None, ["--pipeline-stages", "2", "--pipeline-schedule", "zb-h1", "--recompute"],
                             "--recompute cannot be combined with --pipeline-schedule zb-h1"),
}


def case_refuse(job, name):
    processes, model, flags, expected = REFUSALS[name]
    out = os.path.join(job.work, "refuse." + name)
    shutil.rmtree(out, ignore_errors=True)
    # A layout that is wrong whatever the model must be refused before the data set or the weights are read: give
    # paths that do not exist, so reading either would fail with another message. Only the stage count needs the
    # model (its layers).
    missing = os.path.join(job.work, "does-not-exist")
    model_flags = ["--model", job.model(model)] + data_flag() if model else \
        ["--model", missing, "--data", "chestxray14:" + missing]
    result = job.train(processes, model_flags + COMMON + THREADS + SGD + STEPS + flags + ["--output-dir", out],
                       expect_ok=False, timeout=60)
    output = result.stdout + result.stderr
    print(output)
    print(f"exit status {result.returncode} after {result.seconds:.1f} s")
    if result.returncode == 0:
        sys.exit("FAIL: the bad configuration was accepted")
    if expected not in output:
        sys.exit(f"FAIL: the message does not say {expected!r}")
    if os.path.exists(out):
        sys.exit(f"FAIL: {out} was created: work started before the configuration was refused")
    if "training [" in output:
        sys.exit("FAIL: training started before the configuration was refused")


def linked_copy_of_sample(root):
    """The sample dataset with every image a symlink to the original, so one can be replaced cheaply."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "images"))
    for name in ("Data_Entry_2017_v2020.csv", "train_val_list.txt", "test_list.txt"):
        shutil.copy(os.path.join(SAMPLE, name), root)
    for name in os.listdir(os.path.join(SAMPLE, "images")):
        os.symlink(os.path.join(SAMPLE, "images", name), os.path.join(root, "images", name))


def case_rank_raises(job):
    # 2 stages x 2 replicas: ranks 0 and 2 are the first stages and load replica 0's and replica 1's images. An image
    # of replica 1's share of step 2 is truncated, so rank 2 alone fails, in the middle of training, while rank 0
    # waits for it in the data-parallel all-reduce and ranks 1 and 3 wait for activations.
    root = os.path.join(job.work, "fail.rank-raises.data")
    linked_copy_of_sample(root)
    items = job.run([job.probe, "chestxray14:" + root, "--batch-size", "8", "--replicas", "2", "--replica", "1",
                     "--step", "1", "--seed", "5", "--val-fraction", "0"]).stdout.split()
    assert len(items) == 4, items
    victim = items[0]
    with open(os.path.join(SAMPLE, "images", os.path.basename(victim)), "rb") as f:
        head = f.read(200)
    os.unlink(victim)
    with open(victim, "wb") as f:
        f.write(head)  # a PNG cut short: the decoder fails on it
    out = os.path.join(job.work, "fail.rank-raises")
    shutil.rmtree(out, ignore_errors=True)
    result = job.train(4, ["--model", job.model("mini")] + data_flag(root) + COMMON + THREADS + BATCH + SGD +
                       ["--pipeline-stages", "2", "--max-steps", "50", "--output-dir", out], expect_ok=False,
                       timeout=60)
    output = result.stdout + result.stderr
    print(output)
    print(f"exit status {result.returncode} after {result.seconds:.1f} s")
    if result.returncode == 0:
        sys.exit("FAIL: the job exited 0")
    if "error: rank 2:" not in output or os.path.basename(victim) not in output:
        sys.exit(f"FAIL: the output does not name rank 2 and {os.path.basename(victim)}")
    if result.seconds > 15:  # start-up and one step included
        sys.exit(f"FAIL: {result.seconds:.1f} s for the job to go down")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f if line.strip()]
    print(f"steps logged before the failure: {steps}")
    if steps and max(steps) > 1:
        sys.exit("FAIL: training went past the step whose image was corrupted")


def case_rank_killed(job):
    out = os.path.join(job.work, "fail.rank-killed")
    shutil.rmtree(out, ignore_errors=True)
    command = job.mpirun(4) + [VITPIPE, "train", "--model", job.model("mini")] + data_flag() + COMMON + THREADS + \
        BATCH + SGD + ["--pipeline-stages", "2", "--max-steps", "1000000", "--output-dir", out]
    print("$", " ".join(command), flush=True)
    log_path = os.path.join(job.work, "fail.rank-killed.log")
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, env=job.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        metrics = os.path.join(out, "metrics.jsonl")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:  # wait for a few steps
            if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 3:
                break
            time.sleep(0.05)
        if process.poll() is not None:
            sys.exit(f"FAIL: the job ended before the kill:\n{open(log_path).read()}")
        pids = rank_pids(process.pid)
        if set(pids) != {0, 1, 2, 3}:
            sys.exit(f"FAIL: expected 4 ranks as children of mpirun, found {pids}")
        steps_before = sum(1 for _ in open(metrics))
        os.kill(pids[3], signal.SIGKILL)
        killed = time.monotonic()
        try:
            status = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sys.exit("FAIL: mpirun still running 30 s after a rank was killed: the job hangs")
        elapsed = time.monotonic() - killed
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = open(log_path).read()
    print(output)
    print(f"killed rank 3 (pid {pids[3]}) after {steps_before} steps; mpirun exited {status} {elapsed:.1f} s later")
    if status == 0:
        sys.exit("FAIL: mpirun exited 0 after a rank was killed")
    if elapsed > 10:
        sys.exit(f"FAIL: {elapsed:.1f} s for the job to go down (limit 10 s)")
    if "rank 3" not in output:
        sys.exit("FAIL: the output does not say which rank died")
    time.sleep(0.5)
    survivors = [pid for pid in pids.values() if os.path.exists(f"/proc/{pid}") and
                 open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    if survivors:
        sys.exit(f"FAIL: ranks still alive after mpirun exited: {survivors}")


# A resumed run keeps its own layout unless the command gives another (train_options.json is the base of its options),
# so each second layout names what it changes.
RESUMES = {  # name: (first layout, second layout), each (processes, flags)
    "2x2-to-1": ((4, ["--pipeline-stages", "2"]), (0, ["--pipeline-stages", "1"])),
    "1-to-2x2": ((0, []), (4, ["--pipeline-stages", "2"])),
    "4stages-gpipe-to-2x2-interleaved": ((4, ["--pipeline-stages", "4", "--pipeline-schedule", "gpipe"]),
                                         (4, ["--pipeline-stages", "2", "--pipeline-schedule", "interleaved",
                                              "--virtual-stages", "2"])),
    # Sharded optimizer state written as the whole model's moments and read back by any layout, and back.
    "sharded-replicas4-to-1": ((4, ["--shard-optimizer"]), (0, ["--no-shard-optimizer"])),
    "1-to-sharded-2x2-zb-h1": ((0, []), (4, ["--pipeline-stages", "2", "--pipeline-schedule", "zb-h1",
                                             "--shard-optimizer"])),
    "sharded-2x2-to-sharded-replicas2": ((4, ["--pipeline-stages", "2", "--shard-optimizer"]),
                                         (2, ["--pipeline-stages", "1", "--shard-optimizer"])),
}


def case_resume(job, name):
    (first_processes, first_flags), (second_processes, second_flags) = RESUMES[name]
    out = os.path.join(job.work, "resume." + name)
    shutil.rmtree(out, ignore_errors=True)
    flags = ["--model", job.model("mini")] + data_flag() + COMMON + THREADS + BATCH + ADAMW + ["--output-dir", out]
    job.train(first_processes, flags + first_flags + ["--max-steps", "2"])
    result = job.train(second_processes, flags + second_flags + ["--max-steps", "4", "--resume"])
    if "resuming from" not in result.stderr or "at step 2" not in result.stderr:
        sys.exit("FAIL: the second run did not resume from step 2:\n" + result.stderr)
    # The layout really changed: the checkpoint holds the whole model and its optimizer moments.
    compare(os.path.join(job.model("mini"), "model.safetensors"),
            os.path.join(job.model("reference-adamw"), "model", "model.safetensors"),
            os.path.join(out, "model", "model.safetensors"), f"resumed {name}")


def case_trace(job):
    out = os.path.join(job.work, "trace")
    shutil.rmtree(out, ignore_errors=True)
    trace_path = os.path.join(job.work, "trace.json")
    if os.path.exists(trace_path):
        os.remove(trace_path)
    steps, traced = 52, 50  # the trainer keeps the first 50 steps
    job.train(4, ["--model", job.model("micro")] + data_flag() + COMMON + THREADS + BATCH + SGD +
              ["--pipeline-stages", "2", "--max-steps", str(steps), "--trace", trace_path, "--output-dir", out])
    with open(trace_path) as f:
        trace = json.load(f)  # valid JSON or this throws
    events = trace["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    print("processes:", sorted(names))
    assert {pid for pid, _ in names} == {0, 1, 2, 3}, names
    spans = [e for e in events if e.get("ph") == "X"]
    for e in spans:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        assert e["pid"] in (0, 1, 2, 3), e
    micro_batches = 2  # 8 / (2 x 2 replicas)
    # rank -> what it must show: first stages send activations and receive gradients, last stages the reverse.
    expected = {0: ["send activation", "recv grad"], 1: ["recv activation", "send grad"],
                2: ["send activation", "recv grad"], 3: ["recv activation", "send grad"]}
    failures = []
    for rank, p2p in expected.items():
        mine = [e for e in spans if e["pid"] == rank]
        counts = {}
        for e in mine:
            counts[e["name"]] = counts.get(e["name"], 0) + 1
        print(f"rank {rank}: {dict(sorted(counts.items()))}")
        for name in ["forward", "backward"] + p2p:
            if counts.get(name, 0) != traced * micro_batches:
                failures.append(f"rank {rank}: {counts.get(name, 0)} '{name}' events, "
                                f"expected {traced * micro_batches}")
        if not any(e["cat"] == "allreduce" and e["name"] == "allreduce" for e in mine):
            failures.append(f"rank {rank}: no gradient all-reduce event")
        traced_steps = sorted({e["args"]["step"] for e in mine if e["name"] == "forward"})
        if traced_steps != list(range(traced)):
            failures.append(f"rank {rank}: forward events of steps {traced_steps[:3]}..{traced_steps[-3:]}, "
                            f"expected 0..{traced - 1}")
        # Per step, on this rank: micro-batches forward in order, backward in order, each forward before its backward.
        for step in range(traced):
            compute = sorted((e for e in mine if e["cat"] == "compute" and e["args"]["step"] == step),
                             key=lambda e: e["ts"])
            forwards = [e["args"]["micro_batch"] for e in compute if e["name"] == "forward"]
            backwards = [e["args"]["micro_batch"] for e in compute if e["name"] == "backward"]
            order = [(e["name"], e["args"]["micro_batch"]) for e in compute]
            if forwards != list(range(micro_batches)) or backwards != list(range(micro_batches)) or any(
                    order.index(("forward", mb)) > order.index(("backward", mb)) for mb in range(micro_batches)):
                failures.append(f"rank {rank} step {step}: compute order {order}")
                break
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("case")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    job = Job(args)
    kind, _, name = args.case.partition(".")
    if args.case == "setup":
        case_setup(job)
    elif args.case == "equal.masked-stages2x2":
        case_equal_masked(job)
    elif args.case == "equal.interleaved2-24-micro-batches":
        case_equal_many_micro_batches(job)
    elif kind == "equal":
        case_equal(job, name)
    elif kind == "refuse":
        case_refuse(job, name)
    elif args.case == "fail.rank-raises":
        case_rank_raises(job)
    elif args.case == "fail.rank-killed":
        case_rank_killed(job)
    elif kind == "resume":
        case_resume(job, name)
    elif kind == "sharded":
        case_sharded(job, name)
    elif kind == "layout-auto" and name == "predicted-vs-measured":
        case_layout_auto_timing(job)
    elif kind == "layout-auto":
        case_layout_auto(job, int(name.removeprefix("ranks")))
    elif kind == "plan":
        case_plan(job, name)
    elif kind == "families":
        case_families(job, name)
    elif args.case == "sharded-lora.stages2x2-zb-h1":
        case_sharded_lora(job)
    elif args.case == "trace":
        case_trace(job)
    else:
        sys.exit(f"unknown case {args.case}")
    print("ok")


if __name__ == "__main__":
    main()
