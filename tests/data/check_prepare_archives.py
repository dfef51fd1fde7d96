"""`vitpipe data prepare --data chestxray14:DIR` from the dataset as NIH ships it (issue 46): the bundled sample's
1,000 images packed into images_001..003.tar.gz with Python's tarfile (members images/NAME.png, as NIH's) give a cache
byte-identical to the one prepared from the unpacked folder (pixels.u8, index.json; the manifest differs only in the
source's fingerprint), and so does the Kaggle layout images_00X/images/*.png (hard links: the manifest too). A
truncated archive fails naming it and the member where it broke, keeps the images decoded before it, and a second
run with the archive restored decodes only the rest; a record torn by a kill is cut off, not used. The cache is
then read through cache:DIR (inspect), refused as stale once an archive changes, and train / eval on the archives
themselves are refused with the way to go."""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

VITPIPE = os.environ["VITPIPE"]
SOURCE = os.environ.get("VITPIPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLE = os.path.join(SOURCE, "data", "chestxray14-sample")
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f"  [{detail}]" if detail else ""))
    if not ok:
        failures.append(what)


def prepare(root, out, expect_ok=True):
    r = subprocess.run([VITPIPE, "data", "prepare", "--data", "chestxray14:" + root, "--image-size", "24", "--threads",
                        "2", "--out", out], capture_output=True, text=True)
    if expect_ok and r.returncode != 0:
        sys.exit(f"data prepare {root} failed:\n{r.stderr}")
    return r


def read(path):
    with open(path, "rb") as f:
        return f.read()


def manifest_without_images_fingerprint(cache):
    m = json.loads(read(os.path.join(cache, "manifest.json")))
    del m["fingerprint"]["images_sha256"]
    return m


def same_cache(a, b, what, whole_manifest):
    for name in ("pixels.u8", "index.json"):
        check(read(os.path.join(a, name)) == read(os.path.join(b, name)), f"{what}: {name} byte-identical")
    if whole_manifest:
        check(read(os.path.join(a, "manifest.json")) == read(os.path.join(b, "manifest.json")),
              f"{what}: manifest.json byte-identical")
    else:
        check(manifest_without_images_fingerprint(a) == manifest_without_images_fingerprint(b),
              f"{what}: manifest.json equal but for the images' fingerprint")


def pack(root, archive, names):
    with tarfile.open(os.path.join(root, archive), "w:gz") as tar:
        for name in names:
            tar.add(os.path.join(SAMPLE, "images", name), arcname="images/" + name)


work = tempfile.mkdtemp(prefix="vitpipe_prepare_archives_")
try:
    root = os.path.join(work, "ChestX-ray14")  # one root for every layout: the manifests name the same source
    os.makedirs(os.path.join(root, "images"))
    for name in os.listdir(SAMPLE):
        if name.endswith((".csv", ".txt")):
            shutil.copy(os.path.join(SAMPLE, name), root)
    images = sorted(n for n in os.listdir(os.path.join(SAMPLE, "images")) if n.endswith(".png"))
    for name in images:
        os.link(os.path.join(SAMPLE, "images", name), os.path.join(root, "images", name))
    folder_cache = os.path.join(work, "from_folder")
    prepare(root, folder_cache)

    # The Kaggle layout: images_001/images/*.png .. images_003/images/*.png (the same files, hard-linked).
    parts = [images[0:334], images[334:667], images[667:]]
    shutil.rmtree(os.path.join(root, "images"))
    for k, names in enumerate(parts):
        os.makedirs(os.path.join(root, f"images_00{k + 1}", "images"))
        for name in names:
            os.link(os.path.join(SAMPLE, "images", name), os.path.join(root, f"images_00{k + 1}", "images", name))
    kaggle_cache = os.path.join(work, "from_kaggle")
    prepare(root, kaggle_cache)
    same_cache(folder_cache, kaggle_cache, "Kaggle layout", whole_manifest=True)

    # NIH's archives.
    for k in range(3):
        shutil.rmtree(os.path.join(root, f"images_00{k + 1}"))
    for k, names in enumerate(parts):
        pack(root, f"images_00{k + 1}.tar.gz", names)
    archive_cache = os.path.join(work, "from_archives")
    r = prepare(root, archive_cache)
    check("reading 3 archives" in r.stderr, "prepare says it reads the archives", r.stderr[-300:])
    check(re.search(r"decode archives .* img/s ETA", r.stderr) is not None, "progress with images/s and an ETA")
    same_cache(folder_cache, archive_cache, "archives", whole_manifest=False)
    check(not os.path.exists(os.path.join(archive_cache, "staging")), "the staging folder is gone once done")
    r = subprocess.run([VITPIPE, "data", "inspect", "--data", "cache:" + archive_cache, "--json"], capture_output=True,
                       text=True)
    check(r.returncode == 0 and json.loads(r.stdout)["total"] == 1000, "inspect reads the cache", r.stderr[-300:])
    r = subprocess.run([VITPIPE, "data", "inspect", "--data", "chestxray14:" + root, "--json"], capture_output=True,
                       text=True)
    check(r.returncode == 0 and json.loads(r.stdout)["total"] == 1000, "inspect lists the archived dataset",
          r.stderr[-300:])
    # Training or evaluating on the archives themselves is refused with the way to go.
    model = os.path.join(work, "model")
    subprocess.run([VITPIPE, "init", "--preset", "vit-micro", "--image-size", "24", "--out", model], check=True,
                   capture_output=True)
    r = subprocess.run([VITPIPE, "eval", "--model", model, "--data", "chestxray14:" + root], capture_output=True,
                       text=True)
    check(r.returncode != 0 and "vitpipe data prepare --data chestxray14:" in r.stderr and "cache:CACHE" in r.stderr,
          "eval on the archives refused, naming data prepare", r.stderr[-300:])

    # A truncated archive: named with the member where it broke; what was decoded before is kept.
    second = os.path.join(root, "images_002.tar.gz")
    whole = read(second)
    with open(second, "wb") as f:
        f.write(whole[: len(whole) * 3 // 5])
    resumed_cache = os.path.join(work, "resumed")
    r = prepare(root, resumed_cache, expect_ok=False)
    broke = re.search(r"images_002\.tar\.gz: corrupt or truncated (in|after) member images/(\S+\.png)", r.stderr)
    check(r.returncode != 0 and broke is not None, "a truncated archive fails naming it and the member",
          r.stderr[-400:])
    kept = re.search(r"the (\d+) images decoded so far are kept", r.stderr)
    if broke and kept:
        member = parts[1].index(broke.group(2)) + (1 if broke.group(1) == "after" else 0)
        expected_kept = len(parts[0]) + len(parts[2]) + member
        check(int(kept.group(1)) == expected_kept, "every image before the break (and the other archives) kept",
              f"{kept.group(1)} kept, {expected_kept} expected")
    else:
        check(False, "the count of images kept is said", r.stderr[-400:])
    check(not os.path.exists(os.path.join(resumed_cache, "manifest.json")), "no cache after the failure")

    # A kill in the middle of a record leaves a torn tail: the next run cuts it off.
    records = os.path.join(resumed_cache, "staging", "images_001.tar.gz.records")
    with open(records, "ab") as f:
        f.write(b"VPR1" + bytes(100))
    with open(second, "wb") as f:
        f.write(whole)
    r = prepare(root, resumed_cache)
    reused = re.search(r"(\d+) images were already staged by an earlier run", r.stderr)
    check(reused is not None and kept is not None and int(reused.group(1)) == int(kept.group(1)),
          "the second run decodes only what the first did not", r.stderr[-400:])
    check("cutting off 104 bytes" in r.stderr, "a torn record is cut off", r.stderr[-400:])
    same_cache(folder_cache, resumed_cache, "resumed from a broken archive", whole_manifest=False)

    # Through the cache: a changed archive makes it stale.
    os.utime(os.path.join(root, "images_003.tar.gz"), ns=(1, 1))
    r = subprocess.run([VITPIPE, "data", "inspect", "--data", "cache:" + resumed_cache], capture_output=True, text=True)
    check(r.returncode != 0 and "stale" in r.stderr, "a changed archive makes the cache stale", r.stderr[-300:])

    # An archive missing: its images are named in one line; --skip-unreadable goes on without them.
    os.remove(os.path.join(root, "images_003.tar.gz"))
    partial_cache = os.path.join(work, "partial")
    r = prepare(root, partial_cache, expect_ok=False)
    check(r.returncode != 0 and f"{len(parts[2])} of 1000 listed images are in none of the 2 archives" in r.stderr,
          "images in no archive are counted in one line", r.stderr[-300:])
    r = subprocess.run([VITPIPE, "data", "prepare", "--data", "chestxray14:" + root, "--image-size", "24", "--out",
                        partial_cache, "--skip-unreadable"], capture_output=True, text=True)
    manifest = json.loads(read(os.path.join(partial_cache, "manifest.json"))) if r.returncode == 0 else {}
    check(manifest.get("images") == len(parts[0]) + len(parts[1]) and
          sorted(manifest.get("skipped_unreadable", [])) == sorted(parts[2]) and
          "images were already staged" in r.stderr, "--skip-unreadable leaves them out, listed", r.stderr[-300:])
finally:
    shutil.rmtree(work, ignore_errors=True)

if failures:
    sys.exit(f"{len(failures)} check(s) failed: {failures}")
print("data prepare from archives: ok")
