"""safetensors interoperability: files from an independent Python writer (torch tensors, bf16 included) are read
correctly by vitpipe, and files vitpipe writes are read correctly by an independent numpy/json reader."""

import json
import os
import struct

import torch

from hf_reference import Checks, probe, read_safetensors, tensor_bytes, temp_dir, write_safetensors, TORCH_TO_NAME

checks = Checks()
directory = temp_dir()
g = torch.Generator().manual_seed(0)


def sample_tensors():
    t = {
        "f64": torch.randn(3, 4, generator=g, dtype=torch.float64),
        "f32": torch.randn(2, 3, 5, generator=g),
        "f16": torch.randn(7, generator=g).half(),
        "bf16": torch.randn(4, 6, generator=g).to(torch.bfloat16),
        "bf16_special": torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 1e-40, 3.0e38], dtype=torch.bfloat16),
        "i64": torch.tensor([-(2 ** 62), 5, 2 ** 40], dtype=torch.int64),
        "i32": torch.randint(-1000, 1000, (3, 3), generator=g, dtype=torch.int32),
        "i16": torch.randint(-30000, 30000, (5,), generator=g, dtype=torch.int16),
        "i8": torch.randint(-128, 127, (9,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 255, (3,), generator=g, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.25),
        "empty": torch.zeros(0, 4),
        "empty_bf16": torch.zeros(2, 0, dtype=torch.bfloat16),
        "unicode \u00e9\u4e2d": torch.arange(3, dtype=torch.float32),
    }
    return t


def dump(path):
    return json.loads(probe("dump", path).stdout)


# 1. Python writes, vitpipe reads: several layouts of the same tensors.
tensors = sample_tensors()
names = list(tensors)
variants = {
    "python_plain.safetensors": dict(metadata={"format": "pt", "source": "python"}),
    "python_reversed.safetensors": dict(order=names[::-1], header_key_order=sorted(names)),
    "python_unpadded.safetensors": dict(metadata={"format": "pt"}, pad_to=1),  # data misaligned: vitpipe copies
}
for file, options in variants.items():
    path = os.path.join(directory, file)
    write_safetensors(path, tensors, **options)
    read = dump(path)
    checks.check(set(read["tensors"]) == set(tensors), f"{file}: names {sorted(read['tensors'])}")
    for name, t in tensors.items():
        got = read["tensors"].get(name)
        if got is None:
            continue
        checks.check(got["dtype"] == TORCH_TO_NAME[t.dtype], f"{file}: {name} dtype {got['dtype']}")
        checks.check(got["shape"] == list(t.shape), f"{file}: {name} shape {got['shape']} != {list(t.shape)}")
        checks.check(bytes.fromhex(got["hex"]) == tensor_bytes(t), f"{file}: {name} bytes differ")
    if "metadata" in options:
        checks.check(read["metadata"] == options["metadata"], f"{file}: metadata {read['metadata']}")

# 2. vitpipe writes, Python reads.
spec = {"metadata": {"epoch": "3"},
        "tensors": [{"name": n, "dtype": TORCH_TO_NAME[t.dtype], "shape": list(t.shape), "hex": tensor_bytes(t).hex()}
                    for n, t in tensors.items()]}
spec_path = os.path.join(directory, "spec.json")
with open(spec_path, "w") as f:
    json.dump(spec, f)
out = os.path.join(directory, "vitpipe.safetensors")
probe("write", spec_path, out)
read, metadata, header_length, header = read_safetensors(out)  # asserts contiguity and no trailing bytes
checks.check(header_length % 8 == 0, f"header length {header_length} is not a multiple of 8")
with open(out, "rb") as f:
    raw = f.read()
text = raw[8:8 + header_length].decode("utf-8")
checks.check(text.startswith("{") and text.rstrip(" ").endswith("}") and text == text.rstrip(" ") +
             " " * (len(text) - len(text.rstrip(" "))), "header is JSON padded with spaces")
checks.check(metadata == {"format": "pt", "epoch": "3"}, f"metadata {metadata}")
for name, t in tensors.items():
    got = read.get(name)
    checks.check(got is not None and got.dtype == t.dtype and got.shape == t.shape and
                 torch.equal(got.view(torch.int16) if t.dtype == torch.bfloat16 else got,
                             t.view(torch.int16) if t.dtype == torch.bfloat16 else t),
                 f"vitpipe-written {name}: {got} != {t}")
    begin = header[name]["data_offsets"][0]
    checks.check((8 + header_length + begin) % max(1, t.element_size()) == 0, f"{name} is not aligned in the file")

# 3. A malformed file from Python is refused with the rule it breaks.
bad = os.path.join(directory, "trailing.safetensors")
write_safetensors(bad, {"x": torch.ones(2)})
with open(bad, "ab") as f:
    f.write(b"\0\0\0")
result = probe("dump", bad, expect_ok=False)
checks.check(result.returncode == 1 and "3 trailing bytes after the last tensor" in result.stderr,
             f"trailing bytes: rc {result.returncode}, {result.stderr.strip()}")
with open(bad, "r+b") as f:
    f.write(struct.pack("<Q", 10 ** 9))
result = probe("dump", bad, expect_ok=False)
checks.check(result.returncode == 1 and "exceeds the limit of 100000000 bytes" in result.stderr,
             f"huge header: {result.stderr.strip()}")

checks.done()
