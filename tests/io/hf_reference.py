"""Independent references for the io tests: a safetensors reader and writer written from the format's spec with
struct/json/numpy (no safetensors package), Hugging Face's ViT module structure rebuilt with torch.nn (no
transformers package), huggingface_hub's shard split, and helpers to run the C++ probe."""

import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from torch import nn

# safetensors dtype <-> (numpy dtype used to move the bytes, torch dtype)
DTYPES = {
    "F64": (np.float64, torch.float64),
    "F32": (np.float32, torch.float32),
    "F16": (np.float16, torch.float16),
    "BF16": (np.int16, torch.bfloat16),  # numpy has no bfloat16: move the bits as int16
    "I64": (np.int64, torch.int64),
    "I32": (np.int32, torch.int32),
    "I16": (np.int16, torch.int16),
    "I8": (np.int8, torch.int8),
    "U8": (np.uint8, torch.uint8),
    "BOOL": (np.bool_, torch.bool),
}
TORCH_TO_NAME = {t: name for name, (_, t) in DTYPES.items()}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def tensor_from_bytes(data, dtype_name, shape):
    np_dtype, torch_dtype = DTYPES[dtype_name]
    array = np.frombuffer(data, dtype=np.dtype(np_dtype).newbyteorder("<")).copy().reshape(shape)
    t = torch.from_numpy(array)
    if torch_dtype == torch.bfloat16:
        t = t.view(torch.bfloat16)
    return t


def write_safetensors(path, tensors, metadata=None, order=None, pad_to=8, header_key_order=None):
    """The spec: u64 LE header length, JSON header, data. `order`: data order (default: dict order);
    `header_key_order`: order of the keys in the JSON text (default: data order); pad_to=1: no padding."""
    names = list(order) if order is not None else list(tensors)
    header = {}
    offset = 0
    blobs = []
    for name in names:
        data = tensor_bytes(tensors[name])
        header[name] = {"dtype": TORCH_TO_NAME[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text_header = {}
    if metadata is not None:
        text_header["__metadata__"] = metadata
    for name in (header_key_order or names):
        text_header[name] = header[name]
    text = json.dumps(text_header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((pad_to - len(text) % pad_to) % pad_to)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """Returns (tensors, metadata, header length, header dict); checks the layout rules on the way."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    data = raw[8 + n:]
    spans = sorted((info["data_offsets"][0], info["data_offsets"][1], name) for name, info in header.items())
    position = 0
    for begin, end, name in spans:
        assert begin == position, f"{path}: gap/overlap at {name}"
        position = end
    assert position == len(data), f"{path}: data section is {len(data)} bytes, tensors cover {position}"
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = tensor_from_bytes(data[begin:end], info["dtype"], info["shape"])
    return tensors, metadata, n, header


def read_sharded(directory, stem="model"):
    """A directory's weights as transformers finds them: model.safetensors, else the index and its shards."""
    single = os.path.join(directory, stem + ".safetensors")
    if os.path.exists(single):
        return read_safetensors(single)[0]
    with open(os.path.join(directory, stem + ".safetensors.index.json")) as f:
        index = json.load(f)
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        part = read_safetensors(os.path.join(directory, shard))[0]
        for name, t in part.items():
            assert index["weight_map"][name] == shard, (name, shard)
            tensors[name] = t
    assert set(tensors) == set(index["weight_map"])
    return tensors


def split_into_shards(state_dict, max_shard_size):
    """huggingface_hub.split_torch_state_dict_into_shards (transformers' save_pretrained), without storage sharing:
    returns {file name: [tensor names]} ({"model.safetensors": all} when one shard suffices) and total size."""
    shard_list, current, current_size, total = [], [], 0, 0
    for name, t in state_dict.items():
        size = t.numel() * t.element_size()
        if size > max_shard_size:
            total += size
            shard_list.append([name])
            continue
        if current_size + size > max_shard_size:
            shard_list.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
        total += size
    if current:
        shard_list.append(current)
    if len(shard_list) == 1:
        return {"model.safetensors": shard_list[0]}, total
    n = len(shard_list)
    return {f"model-{i + 1:05d}-of-{n:05d}.safetensors": names for i, names in enumerate(shard_list)}, total


def save_sharded(directory, state_dict, max_shard_size):
    """What save_pretrained(max_shard_size=...) writes for the weights."""
    files, total = split_into_shards(state_dict, max_shard_size)
    weight_map = {}
    for file, names in files.items():
        write_safetensors(os.path.join(directory, file), {k: state_dict[k] for k in names}, {"format": "pt"})
        weight_map.update({k: file for k in names})
    if len(files) > 1:
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            f.write(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2,
                               sort_keys=True) + "\n")


# --- Hugging Face's ViT module structure (transformers/models/vit/modeling_vit.py), parameters only. ---

class Cfg:
    def __init__(self, **kw):
        self.hidden_size = 48
        self.num_hidden_layers = 2
        self.num_attention_heads = 3
        self.intermediate_size = 96
        self.image_size = 32
        self.patch_size = 8
        self.num_channels = 3
        self.qkv_bias = True
        self.num_labels = 5
        self.__dict__.update(kw)

    @staticmethod
    def from_config_json(path):
        with open(path) as f:
            j = json.load(f)
        keys = ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "image_size",
                "patch_size", "num_channels", "qkv_bias"]
        return Cfg(**{k: j[k] for k in keys}, num_labels=len(j.get("id2label", {"0": 0, "1": 1})))


class ViTPatchEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.projection = nn.Conv2d(c.num_channels, c.hidden_size, kernel_size=c.patch_size, stride=c.patch_size)


class ViTEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, c.hidden_size))
        self.patch_embeddings = ViTPatchEmbeddings(c)
        num_patches = (c.image_size // c.patch_size) ** 2
        self.position_embeddings = nn.Parameter(torch.randn(1, num_patches + 1, c.hidden_size))


class ViTSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.query = nn.Linear(c.hidden_size, c.hidden_size, bias=c.qkv_bias)
        self.key = nn.Linear(c.hidden_size, c.hidden_size, bias=c.qkv_bias)
        self.value = nn.Linear(c.hidden_size, c.hidden_size, bias=c.qkv_bias)


class ViTSelfOutput(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)


class ViTAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = ViTSelfAttention(c)
        self.output = ViTSelfOutput(c)


class ViTIntermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)


class ViTOutput(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.intermediate_size, c.hidden_size)


class ViTLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = ViTAttention(c)
        self.intermediate = ViTIntermediate(c)
        self.output = ViTOutput(c)
        self.layernorm_before = nn.LayerNorm(c.hidden_size, eps=1e-12)
        self.layernorm_after = nn.LayerNorm(c.hidden_size, eps=1e-12)


class ViTEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([ViTLayer(c) for _ in range(c.num_hidden_layers)])


class ViTPooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)


class ViTModel(nn.Module):
    def __init__(self, c, add_pooling_layer=True):
        super().__init__()
        self.embeddings = ViTEmbeddings(c)
        self.encoder = ViTEncoder(c)
        self.layernorm = nn.LayerNorm(c.hidden_size, eps=1e-12)
        self.pooler = ViTPooler(c) if add_pooling_layer else None


class ViTForImageClassification(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.vit = ViTModel(c, add_pooling_layer=False)
        self.classifier = nn.Linear(c.hidden_size, c.num_labels)


def randomize(module, seed):
    """Every parameter random (LayerNorm included), so a swapped tensor cannot go unnoticed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return module


def config_json(c, labels=None, architectures=("ViTForImageClassification",), **extra):
    """config.json as transformers' save_pretrained writes it (json.dumps(indent=2, sort_keys=True))."""
    j = {"architectures": list(architectures), "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu",
         "hidden_dropout_prob": 0.0, "hidden_size": c.hidden_size, "image_size": c.image_size,
         "initializer_range": 0.02, "intermediate_size": c.intermediate_size, "layer_norm_eps": 1e-12,
         "model_type": "vit", "num_attention_heads": c.num_attention_heads, "num_channels": c.num_channels,
         "num_hidden_layers": c.num_hidden_layers, "patch_size": c.patch_size, "qkv_bias": c.qkv_bias,
         "encoder_stride": c.patch_size, "transformers_version": "4.46.0", "torch_dtype": "float32"}
    if labels is not None:
        j["id2label"] = {str(i): name for i, name in enumerate(labels)}
        j["label2id"] = {name: i for i, name in enumerate(labels)}
    j.update(extra)
    return json.dumps(j, indent=2, sort_keys=True) + "\n"


def hf_interpolate_pos_encoding(position_embeddings, new_h, new_w):
    """transformers >= 4.45 ViTEmbeddings.interpolate_pos_encoding, on the parameter alone."""
    class_pos_embed = position_embeddings[:, :1]
    patch_pos_embed = position_embeddings[:, 1:]
    dim = position_embeddings.shape[-1]
    side = int((position_embeddings.shape[1] - 1) ** 0.5)
    patch_pos_embed = patch_pos_embed.reshape(1, side, side, dim).permute(0, 3, 1, 2)
    patch_pos_embed = nn.functional.interpolate(patch_pos_embed, size=(new_h, new_w), mode="bicubic",
                                                align_corners=False)
    patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).reshape(1, -1, dim)
    return torch.cat((class_pos_embed, patch_pos_embed), dim=1)


# --- running the C++ side ---

def probe(*args, expect_ok=True):
    exe = os.environ["IO_PROBE"]
    result = subprocess.run([exe, *map(str, args)], capture_output=True, text=True)
    if expect_ok and result.returncode != 0:
        sys.exit(f"io_probe {' '.join(map(str, args))} failed:\n{result.stderr}")
    return result


def vitpipe(*args, expect_ok=True):
    result = subprocess.run([os.environ["VITPIPE"], *map(str, args)], capture_output=True, text=True)
    if expect_ok and result.returncode != 0:
        sys.exit(f"vitpipe {' '.join(map(str, args))} failed:\n{result.stderr}")
    return result


def temp_dir():
    return tempfile.mkdtemp(prefix="vitpipe_io_py_")


class Checks:
    """Collects failures so one run reports all of them; exits non-zero at the end if any failed."""

    def __init__(self):
        self.failures = 0
        self.count = 0

    def check(self, condition, message):
        self.count += 1
        if not condition:
            self.failures += 1
            print("FAIL:", message)

    def done(self):
        print(f"{self.count - self.failures}/{self.count} checks passed")
        sys.exit(1 if self.failures or self.count == 0 else 0)
