"""`vitpipe data prepare` from NIH-style archives against the same PNGs unpacked (issue 46), at full resolution.

Makes N 1024 x 1024 8-bit grayscale PNGs from the three full-size originals bundled in data/chestxray14-sample
(shifted and mirrored copies with a little sensor-like noise, sigma 0.8 grey levels, so that they compress to
about the 400 KB of NIH's average file, 45 GB / 112,120; saved by Pillow at zlib level 6), packs them into images_001..00K.tar.gz (members images/NAME.png, as NIH's) beside a
folder images/ holding the same files, and times prepare at --image-size 224 from each at 1 and 2 threads.
Prints wall time and CPU time (user + system, all threads): images per CPU-second is the images/s per core.

  /usr/bin/python3 bench/prepare_archives.py build/vitpipe [--images 300] [--archives 3] [--work DIR]
"""
import argparse
import csv
import os
import resource
import shutil
import subprocess
import tarfile
import tempfile
import time

import numpy as np
from PIL import Image

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SAMPLE = os.path.join(SOURCE, "data", "chestxray14-sample")
FINDINGS = ["Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia", "Pneumothorax",
            "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia"]


def make_dataset(root, count, archives):
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    originals = sorted(os.listdir(os.path.join(SAMPLE, "full-size")))
    bases = [np.array(Image.open(os.path.join(SAMPLE, "full-size", name)).convert("L")) for name in originals]
    names = []
    rng = np.random.default_rng(0)
    for k in range(count):
        image = bases[k % len(bases)]
        image = np.roll(image, (int(rng.integers(-40, 40)), int(rng.integers(-40, 40))), axis=(0, 1))
        if k % 2:
            image = image[:, ::-1]
        image = np.clip(image + rng.normal(0, 0.8, image.shape), 0, 255).astype(np.uint8)
        name = f"{k // 3 + 1:08d}_{k % 3:03d}.png"
        Image.fromarray(np.ascontiguousarray(image), "L").save(os.path.join(root, "images", name), compress_level=6)
        names.append(name)
    with open(os.path.join(root, "Data_Entry_2017_v2020.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Image Index", "Finding Labels", "Follow-up #", "Patient ID", "Patient Age", "Patient Gender",
                    "View Position", "OriginalImage[Width", "Height]", "OriginalImagePixelSpacing[x", "y]"])
        for k, name in enumerate(names):
            w.writerow([name, FINDINGS[k % 14] if k % 3 else "No Finding", k % 3, k // 3 + 1, 50, "M", "PA", 1024,
                        1024, 0.143, 0.143])
    with open(os.path.join(root, "train_val_list.txt"), "w") as f:
        f.writelines(n + "\n" for n in names[: count * 4 // 5])
    with open(os.path.join(root, "test_list.txt"), "w") as f:
        f.writelines(n + "\n" for n in names[count * 4 // 5:])
    per = (count + archives - 1) // archives
    packed = os.path.join(root, "packed")
    os.makedirs(packed)
    for a in range(archives):
        with tarfile.open(os.path.join(packed, f"images_{a + 1:03d}.tar.gz"), "w:gz") as tar:
            for name in names[a * per:(a + 1) * per]:
                tar.add(os.path.join(root, "images", name), arcname="images/" + name)
    sizes = [os.path.getsize(os.path.join(root, "images", n)) for n in names]
    return sum(sizes) / len(sizes)


def timed_prepare(vitpipe, root, out, threads):
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([vitpipe, "data", "prepare", "--data", "chestxray14:" + root, "--image-size", "224", "--threads",
                    str(threads), "--out", out], check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("vitpipe")
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--archives", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="vitpipe_prepare_bench_")
    folder = os.path.join(work, "folder")
    archived = os.path.join(work, "archived")
    if not os.path.exists(os.path.join(folder, "test_list.txt")):
        shutil.rmtree(work, ignore_errors=True)
        mean = make_dataset(folder, args.images, args.archives)
        os.makedirs(archived)
        for name in ("Data_Entry_2017_v2020.csv", "train_val_list.txt", "test_list.txt"):
            shutil.copy(os.path.join(folder, name), archived)
        for name in os.listdir(os.path.join(folder, "packed")):
            shutil.move(os.path.join(folder, "packed", name), archived)
        print(f"{args.images} PNGs of 1024 x 1024, {mean / 1024:.0f} KiB on average, in {args.archives} archives")
    print("source    threads  wall s  images/s  CPU s  images per CPU-second")
    for threads in (1, 2):
        for label, root in (("folder", folder), ("archives", archived)):
            best = None
            for _ in range(args.repeats):
                wall, cpu = timed_prepare(args.vitpipe, root, os.path.join(work, "cache"), threads)
                best = (wall, cpu) if best is None or cpu < best[1] else best
            wall, cpu = best
            print(f"{label:9s} {threads:7d} {wall:7.2f} {args.images / wall:9.1f} {cpu:6.2f} {args.images / cpu:9.1f}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
