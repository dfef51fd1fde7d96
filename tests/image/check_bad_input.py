"""Bad input: a truncated DICOM file, a lying length field (in the header and on the pixel data, plain and deflated), a
60000x60000 header, an RLE header pointing outside its fragment, a deflate bomb, transfer syntaxes vitpipe cannot
decode (a known video one and one DCMTK has never heard of), a CheXpert CSV with an unknown value. Each must give exit
code 1 and ONE line on stderr naming the file and the field, and write nothing (`image convert`'s output, `data
prepare`'s cache). Every command runs with 1 GiB of address space (unless the binary is built with AddressSanitizer):
a reader that allocates what a lying length field declares (4 GB) fails with "memory exhausted" instead of naming the
lie."""

import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from pydicom.encaps import encapsulate
from pydicom.uid import ExplicitVRLittleEndian, RLELossless

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dicom_files import write_dicom  # noqa: E402

VITPIPE = os.environ["VITPIPE"]
failures = []


def check(ok, what, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def one_gib_of_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


with open(VITPIPE, "rb") as binary:  # AddressSanitizer maps terabytes of shadow memory: no limit under it
    SANITIZED = b"__asan_init" in binary.read()


def refused(what, command, output, *parts, env=None):
    result = subprocess.run([VITPIPE, *command], capture_output=True, text=True,
                            preexec_fn=None if SANITIZED else one_gib_of_address_space,
                            env=None if env is None else {**os.environ, **env})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    ok = (result.returncode == 1 and len(lines) == 1 and all(p in lines[0] for p in parts) and
          not os.path.exists(output))
    check(ok, what, f"exit {result.returncode}, {len(lines)} line(s): {result.stderr.strip()}")


def dicom_bytes(path, syntax=ExplicitVRLittleEndian, pixel_bytes=None):
    """A 64x48 12-bit gray file written to path; its bytes."""
    write_dicom(path, np.arange(64 * 48, dtype=np.uint16).reshape(64, 48), 16, 12, syntax=syntax,
                pixel_bytes=pixel_bytes)
    with open(path, "rb") as f:
        return bytearray(f.read())


work = tempfile.mkdtemp(prefix="vitpipe_bad_")
good = dicom_bytes(os.path.join(work, "good.dcm"))


def write(name, data):
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(bytes(data))
    return path


def convert(path):
    out = path + ".png"
    return ["image", "convert", path, out], out


pixel_at = good.find(b"\xe0\x7f\x10\x00OW")
patient_at = good.find(b"\x10\x00\x20\x00LO")
rows_at = good.find(b"\x28\x00\x10\x00US")
assert pixel_at > 0 and patient_at > 0 and rows_at > 0

path = write("truncated.dcm", good[: len(good) - 1000])
refused("truncated DICOM", *convert(path), "truncated.dcm", "(7fe0,0010)", "truncated")
path = write("truncated_header.dcm", good[:200])
refused("DICOM truncated in its meta header", *convert(path), "truncated_header.dcm", "(0002,")
lying = bytearray(good)
lying[pixel_at + 8: pixel_at + 12] = struct.pack("<I", 0xFFFFFFF0)
path = write("lying_pixel_length.dcm", lying)
refused("lying Pixel Data length (4 GB)", *convert(path), "lying_pixel_length.dcm", "(7fe0,0010)", "4294967280",
        "premature end of stream")
lying = bytearray(good)
lying[patient_at + 6: patient_at + 8] = struct.pack("<H", 0xFFF0)
path = write("lying_patient_length.dcm", lying)
refused("lying length of a header element", *convert(path), "lying_patient_length.dcm", "(0010,0020)", "65520")


def deflated(explicit_little_endian):
    """The file with its data set deflated (PS3.5 A.5: raw deflate) and the deflate syntax's UID in its meta header."""
    group_at = explicit_little_endian.find(b"\x02\x00\x00\x00UL")
    (group_length,) = struct.unpack("<I", explicit_little_endian[group_at + 8: group_at + 12])
    meta_end = group_at + 12 + group_length
    meta, data_set = bytearray(explicit_little_endian[:meta_end]), explicit_little_endian[meta_end:]
    old_uid, new_uid = ExplicitVRLittleEndian.encode() + b"\0", b"1.2.840.10008.1.2.1.99"
    at = meta.find(b"\x02\x00\x10\x00UI")
    assert meta[at + 8: at + 8 + len(old_uid)] == old_uid
    meta[at + 6: at + 8 + len(old_uid)] = struct.pack("<H", len(new_uid)) + new_uid
    meta[group_at + 8: group_at + 12] = struct.pack("<I", group_length + len(new_uid) - len(old_uid))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return meta + compressor.compress(bytes(data_set)) + compressor.flush()


lying = bytearray(good)
lying[pixel_at + 8: pixel_at + 12] = struct.pack("<I", 0xFFFFFFF0)
path = write("lying_deflated.dcm", deflated(lying))
refused("lying Pixel Data length (4 GB) in a deflated data set", *convert(path), "lying_deflated.dcm", "(7fe0,0010)",
        "4294967280", "premature end of stream")
bomb = bytearray(good)
bomb[pixel_at + 8: pixel_at + 12] = struct.pack("<I", 80 << 20)
path = write("deflate_bomb.dcm", deflated(bomb + bytes(80 << 20)))  # 80 MB of zeros deflate to ~80 kB
refused("deflate bomb (80 MB from 80 kB)", *convert(path), "deflate_bomb.dcm", "deflate bomb", "VITPIPE_MAX_IMAGE_PIXELS",
        env={"VITPIPE_MAX_IMAGE_PIXELS": "4096"})
rle_header = struct.pack("<16I", 2, 64, 1 << 30, *([0] * 13))  # 16 bits: 2 segments, the second at 1 GB
path = os.path.join(work, "rle_outside.dcm")
dicom_bytes(path, syntax=RLELossless, pixel_bytes=encapsulate([rle_header + b"\x7f" + bytes(128)]))
refused("RLE segment offset outside its fragment", *convert(path), "rle_outside.dcm", "(7fe0,0010)", "segment 2",
        "1073741824")
rle_header = struct.pack("<16I", 2, 64, 66, *([0] * 13))  # segment 1 is a lone no-op: it decodes to nothing
path = os.path.join(work, "rle_empty.dcm")
dicom_bytes(path, syntax=RLELossless, pixel_bytes=encapsulate([rle_header + b"\x80\x80" + b"\x81\x00" * 8]))
refused("RLE segment that decodes to nothing", *convert(path), "rle_empty.dcm", "(7fe0,0010)", "segment 1",
        "decodes to nothing")
huge = bytearray(good)
huge[rows_at + 8: rows_at + 10] = struct.pack("<H", 60000)
columns_at = huge.find(b"\x28\x00\x11\x00US")
huge[columns_at + 8: columns_at + 10] = struct.pack("<H", 60000)
path = write("huge.dcm", huge)
refused("60000x60000 header", *convert(path), "huge.dcm", "(0028,0010) Rows", "(0028,0011) Columns", "3600000000")
short = bytearray(good)
short[rows_at + 8: rows_at + 10] = struct.pack("<H", 128)  # the header says twice the pixels the data holds
path = write("short_pixel_data.dcm", short)
refused("pixel data shorter than the header says", *convert(path), "short_pixel_data.dcm", "(7fe0,0010)",
        "12288 bytes are needed")
path = os.path.join(work, "mpeg4.dcm")
dicom_bytes(path, syntax="1.2.840.10008.1.2.4.102", pixel_bytes=encapsulate([b"\0\0\0\1" + bytes(60)]))
refused("video transfer syntax (MPEG-4)", *convert(path), "mpeg4.dcm", "(0002,0010)", "1.2.840.10008.1.2.4.102",
        "MPEG-4")
# pydicom writes known syntaxes only: write JPEG 2000, then put HTJ2K's UID (newer than DCMTK 3.6.7) in its place.
data = dicom_bytes(os.path.join(work, "j2k.dcm"), syntax="1.2.840.10008.1.2.4.90",
                   pixel_bytes=encapsulate([bytes(64)]))
old_uid, new_uid = b"1.2.840.10008.1.2.4.90", b"1.2.840.10008.1.2.4.201\0"
at = data.find(b"\x02\x00\x10\x00UI")
assert data[at + 8: at + 8 + len(old_uid)] == old_uid
data[at + 6: at + 8 + len(old_uid)] = struct.pack("<H", len(new_uid)) + new_uid
group_at = data.find(b"\x02\x00\x00\x00UL")
(group_length,) = struct.unpack("<I", data[group_at + 8: group_at + 12])
data[group_at + 8: group_at + 12] = struct.pack("<I", group_length + len(new_uid) - len(old_uid))
path = write("unknown_syntax.dcm", data)
refused("transfer syntax unknown to DCMTK (HTJ2K)", *convert(path), "unknown_syntax.dcm", "(0002,0010)",
        "1.2.840.10008.1.2.4.201")

# CheXpert: an unknown value in an observation column; `data prepare` must refuse before writing the cache.
root = os.path.join(work, "CheXpert-v1.0-small")
os.makedirs(root)
header = ("Path,Sex,Age,Frontal/Lateral,AP/PA,No Finding,Enlarged Cardiomediastinum,Cardiomegaly,Lung Opacity,"
          "Lung Lesion,Edema,Consolidation,Pneumonia,Atelectasis,Pneumothorax,Pleural Effusion,Pleural Other,"
          "Fracture,Support Devices\n")
with open(os.path.join(root, "train.csv"), "w") as f:
    f.write(header)
    f.write("CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg,Female,68,Frontal,AP,1.0,,,,,,,,,0.0,,,,1.0\n")
    f.write("CheXpert-v1.0-small/train/patient00002/study1/view1_frontal.jpg,Male,70,Frontal,PA,,,-1.0,1.0,,yes,,,,,,,,\n")
with open(os.path.join(root, "valid.csv"), "w") as f:
    f.write(header)
cache = os.path.join(work, "cache")
refused("CheXpert CSV with an unknown value", ["data", "prepare", "--data", "chexpert:" + root, "--out", cache],
        cache, "train.csv line 3", "\"Edema\"", "\"yes\"")

# An output path that is a folder, or in a folder that does not exist: one line naming it before any work (it was
# "cannot rename OUT.tmp-PID to OUT: Is a directory" after it, or a temporary's name the user never typed).
folder = os.path.join(work, "a-folder")
os.makedirs(folder)
result = subprocess.run([VITPIPE, "image", "convert", os.path.join(work, "good.dcm"), folder], capture_output=True,
                        text=True)
lines = [line for line in result.stderr.splitlines() if line.strip()]
check(result.returncode == 1 and len(lines) == 1 and folder + ": is a folder (expected a file to write)" in lines[0]
      and not os.listdir(folder) and not [n for n in os.listdir(work) if ".tmp-" in n],
      "image convert into a folder: one line naming it", f"exit {result.returncode}: {result.stderr.strip()}")
missing = os.path.join(work, "no-such-folder", "out.png")
result = subprocess.run([VITPIPE, "image", "convert", os.path.join(work, "good.dcm"), missing], capture_output=True,
                        text=True)
lines = [line for line in result.stderr.splitlines() if line.strip()]
check(result.returncode == 1 and len(lines) == 1 and "cannot write " + missing in lines[0] and
      "does not exist" in lines[0] and ".tmp-" not in lines[0],
      "image convert into a missing folder: one line naming it", f"exit {result.returncode}: {result.stderr.strip()}")

shutil.rmtree(work, ignore_errors=True)
if failures:
    print(f"{len(failures)} check(s) failed:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("all checks passed")
