"""Loader throughput of DICOM beside Pillow, side by side in one run, one thread each (images/s per core):

    bench/dicom_vs_pillow.py [--bench build/bench/bench_dicom_decode] [--repeat 3]

Writes a 2500x2000 12-bit chest X-ray (the bundled 1024x1024 original upscaled, 12 bits with noise) as DICOM
(explicit VR little endian, and JPEG lossless SV1 by DCMTK's dcmcjpeg, with a window), as a 16-bit PNG, and at 8
bits as a PNG; then, alternating N times, vitpipe decodes + maps to 8 bits + resizes to 224x224 (Pillow's bilinear,
bit-exact) each file, and Pillow opens the 8-bit PNG and resizes it to 224 (gray, and after convert("RGB") as
transformers' processor does). Prints images/s and the ratio to Pillow's gray 8-bit PNG."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pydicom
from PIL import Image
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

HERE = os.path.dirname(os.path.abspath(__file__))


def write_files(folder):
    source = Image.open(os.path.join(HERE, "..", "tests", "fixtures", "images", "00000013_003.png")).convert("L")
    big = np.asarray(source.resize((2000, 2500), Image.BICUBIC), dtype=np.float64)
    rng = np.random.default_rng(0)
    words = np.clip(big * 16 + rng.normal(0, 8, big.shape), 0, 4095).astype(np.uint16)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.1.1"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    path = os.path.join(folder, "dicom_uncompressed_12bit.dcm")
    ds = FileDataset(path, {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.Modality, ds.PatientID = "DX", "bench"
    ds.Rows, ds.Columns = words.shape
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    ds.WindowCenter, ds.WindowWidth = 2048, 4096
    ds.PixelData = words.tobytes()
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.save_as(path, write_like_original=False)
    subprocess.run(["dcmcjpeg", "+e1", path, os.path.join(folder, "dicom_jpeg_lossless_12bit.dcm")], check=True)
    Image.fromarray(words, "I;16").save(os.path.join(folder, "png_16bit.png"))
    Image.fromarray((words >> 4).astype(np.uint8), "L").save(os.path.join(folder, "png_8bit.png"))


def pillow_rate(path, rgb, seconds=3.0):
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or count < 3:
        image = Image.open(path)
        if rgb:
            image = image.convert("RGB")
        image.resize((224, 224), Image.BILINEAR)
        count += 1
    return count / (time.perf_counter() - start)


def vitpipe_rates(bench, folder):
    env = dict(os.environ, VITPIPE_BENCH_IMAGES=folder, OMP_NUM_THREADS="1")
    out = subprocess.run([bench, "--benchmark_format=json", "--benchmark_min_time=3"], env=env, capture_output=True,
                         text=True, check=True).stdout
    rates = {}
    for b in json.loads(out)["benchmarks"]:
        rates[b["name"].split("/", 1)[1]] = b["items_per_second"]
    return rates


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bench", "bench_dicom_decode"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="vitpipe_dicom_bench_")
    try:
        write_files(folder)
        sizes = {name: os.path.getsize(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}
        runs = []
        for _ in range(args.repeat):
            rates = {f"vitpipe {k}": v for k, v in vitpipe_rates(args.bench, folder).items()}
            rates["Pillow png_8bit.png (L)"] = pillow_rate(os.path.join(folder, "png_8bit.png"), rgb=False)
            rates["Pillow png_8bit.png (convert RGB)"] = pillow_rate(os.path.join(folder, "png_8bit.png"), rgb=True)
            runs.append(rates)
        print(f"2500x2000 chest X-ray, decode + 8-bit mapping + resize to 224x224, one thread, {args.repeat} "
              "alternating runs (min..max)")
        for name, size in sizes.items():
            print(f"  {name}: {size / 1e6:.1f} MB")
        print(f"{'case':<48} {'images/s per core':>20} {'vs Pillow 8-bit PNG (L)':>26}")
        for key in runs[0]:
            values = [r[key] for r in runs]
            ratios = [r[key] / r["Pillow png_8bit.png (L)"] for r in runs]
            print(f"{key:<48} {min(values):>9.1f}..{max(values):<9.1f} {min(ratios):>12.2f}..{max(ratios):<.2f}x")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
