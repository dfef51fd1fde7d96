"""`vitpipe data inspect --json` against counts computed here with Python's csv module, for the bundled sample
and for both full NIH CSV variants (with only the sample's images on disk)."""
import collections
import csv
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile

VITPIPE = os.environ["VITPIPE"]
SOURCE = os.environ["VITPIPE_SOURCE_DIR"]
SAMPLE = os.path.join(SOURCE, "data", "chestxray14-sample")
FIXTURES = os.path.join(SOURCE, "tests", "fixtures", "chestxray14")


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        return f.read()


def expected_summary(csv_path, train_val_path, test_path, images_dir):
    present = set(os.listdir(images_dir))
    rows = list(csv.reader(io.StringIO(read_text(csv_path))))
    header, rows = rows[0], rows[1:]
    col = {name: i for i, name in enumerate(header)}
    test = set(read_text(test_path).split())
    train_val = set(read_text(train_val_path).split())
    total = missing = 0
    labels = collections.Counter()
    views = collections.Counter()
    split_images = collections.Counter()
    patients = collections.defaultdict(set)
    for row in rows:
        name = row[col["Image Index"]]
        if name not in present:
            missing += 1
            continue
        total += 1
        labels.update(row[col["Finding Labels"]].split("|"))
        views[row[col["View Position"]]] += 1
        split = "test" if name in test else ("train_val" if name in train_val else "none")
        split_images[split] += 1
        patients[split].add(int(row[col["Patient ID"]]))
    return total, missing, labels, views, split_images, patients


def inspect(spec, *flags):
    out = subprocess.run([VITPIPE, "data", "inspect", "--data", spec, "--json", *flags], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def check(got, csv_path, train_val_path, test_path, images_dir):
    total, missing, labels, views, split_images, patients = expected_summary(csv_path, train_val_path, test_path,
                                                                              images_dir)
    assert got["total"] == total, (got["total"], total)
    assert got["missing"] == missing, (got["missing"], missing)
    assert got["splits"]["test"] == split_images["test"], got["splits"]
    assert got["splits"]["train"] + got["splits"]["val"] == split_images["train_val"], got["splits"]
    assert got["splits"]["val"] >= round(0.1 * split_images["train_val"]), got["splits"]
    counts = {k: v for k, v in got["label_counts"].items() if v > 0}
    assert counts == dict(labels), (counts, dict(labels))
    assert got["views"] == dict(views), (got["views"], views)
    assert got["patients"]["test"] == len(patients["test"]), got["patients"]
    assert got["patients_in_two_splits"] == 0


def main():
    got = inspect("chestxray14:" + SAMPLE)
    check(got, os.path.join(SAMPLE, "Data_Entry_2017_v2020.csv"), os.path.join(SAMPLE, "train_val_list.txt"),
          os.path.join(SAMPLE, "test_list.txt"), os.path.join(SAMPLE, "images"))
    assert got["total"] == 1000 and got["missing"] == 0 and got["splits"]["test"] == 310

    for variant in ["Data_Entry_2017_v2020.csv.gz", "Data_Entry_2017.csv.gz"]:
        with tempfile.TemporaryDirectory() as root:
            for name in [variant, "train_val_list.txt.gz", "test_list.txt.gz"]:
                os.symlink(os.path.join(FIXTURES, name), os.path.join(root, name))
            os.symlink(os.path.join(SAMPLE, "images"), os.path.join(root, "images"))
            got = inspect("chestxray14:" + root)
            check(got, os.path.join(root, variant), os.path.join(root, "train_val_list.txt.gz"),
                  os.path.join(root, "test_list.txt.gz"), os.path.join(root, "images"))
            assert got["missing"] == 111120, got["missing"]
            pa = inspect("chestxray14:" + root, "--view", "PA")
            assert pa["total"] == 637 and pa["views"] == {"PA": 637}, pa["views"]

    table = subprocess.run([VITPIPE, "data", "inspect", "--data", "chestxray14:" + SAMPLE], check=True,
                           capture_output=True, text=True).stdout
    assert "Effusion" in table and "1000 found" in table, table
    bad = subprocess.run([VITPIPE, "data", "inspect", "--data", "chestxray14:/no/such/root", "--json"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "error:" in bad.stderr and "/no/such/root" in bad.stderr, bad.stderr
    print("data inspect agrees with the CSV files")


if __name__ == "__main__":
    sys.exit(main())
