"""A minimal safetensors reader in numpy (the tests may not use safetensors-python)."""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = entry["dtype"]
        if dtype == "BF16":
            raw = np.frombuffer(data[base + begin:base + end], dtype=np.uint16).astype(np.uint32) << 16
            array = raw.view(np.float32)
        else:
            array = np.frombuffer(data[base + begin:base + end], dtype=_DTYPES[dtype])
        tensors[name] = array.reshape(entry["shape"]).astype(np.float64)
    return tensors
