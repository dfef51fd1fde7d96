"""`vitpipe train` on label sets that cannot train, end to end: a csv: label column holding only "2" and a
single-label column with one class are refused (exit code 1, one error line naming the column and rows) before
anything is written; a label with no positive image in the training split trains, with a warning naming it."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

checks = e2e.Checks()
root = e2e.temp_dir("label_sets")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 16, "val": 8}, size=16, seed=8)
rows = e2e.read_csv_rows(csv)
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--image-size", "16", "--out", init)


def write_csv(name, header, values):
    path = os.path.join(root, "data", name)
    with open(path, "w") as f:
        f.write(header + "\n" + "".join(f"{row['path']},{row['split']},{value}\n" for row, value in zip(rows, values)))
    return path


def train(path, name):
    out = os.path.join(root, name)
    result = e2e.run(*e2e.train_args(init, "csv:" + path, out, "--max-steps", "1", "--batch-size", "8",
                                     "--micro-batch-size", "8", "--threads", "1"), expect_ok=False)
    return result, out


for name, values, phrase in (
        ("only_twos.csv", ["2"] * len(rows), 'column "label" holds numbers other than 1, 0 and -1 ("2" at lines 2, 3, 4 '
                                             f'and {len(rows) - 3} more)'),
        ("one_class.csv", ["Effusion"] * len(rows), 'column "label" holds one class ("Effusion") in every row')):
    result, out = train(write_csv(name, "path,split,label", values), name)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    checks.check(result.returncode == 1 and len(errors) == 1 and phrase in errors[0],
                 f"train refuses {name}: exit 1, one error line naming the column and rows", str(errors or
                                                                                                result.stderr[-500:]))
    checks.check(not os.path.exists(out), f"{name}: nothing written")
    if errors:
        print(errors[0])

# "blue" positive only in val: training warns about it by name and goes on.
values = [(row["red"] + "," + ("1" if row["split"] == "val" else "0")) for row in rows]
result, out = train(write_csv("no_blue.csv", "path,split,red,blue", values), "no_blue")
warnings = [line for line in result.stderr.splitlines() if 'label "blue" has no positive image in the train split' in
            line]
checks.check(result.returncode == 0 and len(warnings) == 1, "a label without a positive training image: one warning "
             "naming it, and training goes on", result.stderr[-600:])
if warnings:
    print(warnings[0])

e2e.cleanup(root)
checks.finish()
