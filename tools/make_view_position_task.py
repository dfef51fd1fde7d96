#!/usr/bin/env python3
"""Writes data/chestxray14-sample/view_position.csv: the bundled ChestX-ray14 sample as a `csv:` dataset whose one
label is the projection, "AP" (1) vs PA (0), from the metadata's View Position column. AP films are the portable,
often supine ones; a small model learns this from the pixels where it cannot learn the 14 findings from 621 images.
The official lists give the split (test_list.txt -> test; train_val_list.txt -> train_val, which vitpipe divides
into train and val by patient), and the patient column keeps the division patient-disjoint.

usage: tools/make_view_position_task.py [SAMPLE_DIR]   (default: data/chestxray14-sample)
"""
import csv
import os
import sys

sample = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data",
                                                            "chestxray14-sample")
test = {line.strip() for line in open(os.path.join(sample, "test_list.txt")) if line.strip()}
train_val = {line.strip() for line in open(os.path.join(sample, "train_val_list.txt")) if line.strip()}
rows = []
with open(os.path.join(sample, "Data_Entry_2017_v2020.csv")) as f:
    for row in csv.DictReader(f):
        name = row["Image Index"]
        if name not in test and name not in train_val:
            continue
        assert row["View Position"] in ("AP", "PA"), row
        rows.append(("images/" + name, row["Patient ID"], "test" if name in test else "train_val",
                     "1" if row["View Position"] == "AP" else "0"))
with open(os.path.join(sample, "view_position.csv"), "w", newline="") as f:
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(["path", "patient", "split", "AP"])
    writer.writerows(rows)
print(f"{len(rows)} images, {sum(r[3] == '1' for r in rows)} AP")
