"""Silent data choices said aloud (issue 45, defect 6), each in one warning line that says what to do:
- a folder: dataset without train/ val/ test/ subfolders is divided into train and val by image, with no patient
  grouping: one line naming patient leakage and the way out (a csv: dataset with a patient column); none with the
  split subfolders, none for a csv: with a patient column; a csv: without one gets the line too;
- a csv: with '|'-joined labels naming "No Finding" reads it as a label of its own (one more than a findings-only
  head): one line naming the label and how to keep the head (--labels chestxray14); none with --labels."""
import os
import shutil
import subprocess
import sys
import tempfile

VITPIPE = os.environ["VITPIPE"]
SOURCE = os.environ.get("VITPIPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
IMAGES = os.path.join(SOURCE, "tests", "fixtures", "images")
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f"  [{detail}]" if detail else ""))
    if not ok:
        failures.append(what)


def warnings(*args):
    r = subprocess.run([VITPIPE, "data", "inspect", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"data inspect {args} failed: {r.stderr}")
    return [line for line in r.stderr.splitlines() if line.startswith("warning:")]


def leakage(lines):
    return [line for line in lines if "patient" in line and "leakage" in line]


root = tempfile.mkdtemp(prefix="vitpipe_data_choices_")
try:
    images = sorted(os.listdir(IMAGES))
    flat = os.path.join(root, "flat")
    for k, name in enumerate(images):
        os.makedirs(os.path.join(flat, "ab"[k % 2]), exist_ok=True)
        shutil.copy(os.path.join(IMAGES, name), os.path.join(flat, "ab"[k % 2], name))
    lines = leakage(warnings("--data", "folder:" + flat))
    check(len(lines) == 1 and "csv:" in lines[0] and "patient column" in lines[0],
          "folder: divided by image: one line naming patient leakage and the csv: patient column", str(lines))
    split = os.path.join(root, "split")
    for k, name in enumerate(images):
        d = os.path.join(split, ["train", "val", "test"][k % 3], "ab"[k % 2])
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(IMAGES, name), d)
    lines = leakage(warnings("--data", "folder:" + split))
    check(lines == [], "folder: with train/ val/ test/: no leakage line", str(lines))

    def write_csv(name, header, rows):
        path = os.path.join(root, name)
        with open(path, "w") as f:
            f.write(header + "\n" + "".join(r + "\n" for r in rows))
        return path

    labels = ["Atelectasis|Effusion", "No Finding", "Mass", "No Finding", "Effusion"]
    paths = [os.path.join(IMAGES, n) for n in images]
    with_patients = write_csv("nih.csv", "path,Finding Labels,Patient ID",
                              [f"{p},{l},{i}" for i, (p, l) in enumerate(zip(paths, labels))])
    lines = warnings("--data", "csv:" + with_patients)
    check(leakage(lines) == [], "csv: with a patient column: no leakage line", str(lines))
    no_finding = [line for line in lines if '"No Finding"' in line]
    check(len(no_finding) == 1 and "--labels chestxray14" in no_finding[0] and "head" in no_finding[0],
          'csv: "No Finding" among joined labels: one line naming it and how to keep the head', str(lines))
    lines = warnings("--data", "csv:" + with_patients, "--labels", "chestxray14")
    check(not [line for line in lines if '"No Finding"' in line], "csv: with --labels chestxray14: no such line")
    no_patients = write_csv("plain.csv", "path,Finding Labels", [f"{p},{l}" for p, l in zip(paths, labels)])
    lines = leakage(warnings("--data", "csv:" + no_patients))
    check(len(lines) == 1 and "add a patient column" in lines[0], "csv: without a patient column: the leakage line",
          str(lines))
finally:
    shutil.rmtree(root, ignore_errors=True)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
