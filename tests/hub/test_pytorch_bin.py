"""read_pytorch_bin against files written by torch.save (Debian's python3-torch), and against hostile files.

Env: HUB_DUMP_PYTORCH_BIN, a driver that reads a checkpoint with read_pytorch_bin and writes each tensor's bytes
plus a manifest (dtype, shape, data address). Every tensor must equal torch's byte for byte; every hostile file must
be refused with a clear message, and a marker file proves that nothing in it ran.
"""

import collections
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest
import zipfile

import numpy as np
import torch

DUMP = os.environ.get("HUB_DUMP_PYTORCH_BIN", "hub_dump_pytorch_bin")
DTYPE_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
               torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}
HIDDEN = 32


def vit_like_state_dict():
    """A small ViT state dict, plus what makes a reader's life hard: float16/bfloat16/float64/int64 tensors, a saved
    transpose (non-contiguous), views into one shared storage at different offsets, a stride-0 expanded buffer,
    a 0-d tensor and an empty one."""
    g = torch.Generator().manual_seed(0)
    sd = collections.OrderedDict()
    sd["vit.embeddings.cls_token"] = torch.randn(1, 1, HIDDEN, generator=g)
    sd["vit.embeddings.position_embeddings"] = torch.randn(1, 5, HIDDEN, generator=g)
    sd["vit.embeddings.patch_embeddings.projection.weight"] = torch.randn(HIDDEN, 3, 4, 4, generator=g)
    sd["vit.embeddings.patch_embeddings.projection.bias"] = torch.randn(HIDDEN, generator=g)
    for layer in range(2):
        prefix = f"vit.encoder.layer.{layer}."
        for name in ("attention.attention.query", "attention.attention.key", "attention.attention.value",
                     "attention.output.dense"):
            sd[prefix + name + ".weight"] = torch.randn(HIDDEN, HIDDEN, generator=g)
            sd[prefix + name + ".bias"] = torch.randn(HIDDEN, generator=g)
        sd[prefix + "intermediate.dense.weight"] = torch.randn(4 * HIDDEN, HIDDEN, generator=g)
        sd[prefix + "output.dense.weight"] = torch.randn(4 * HIDDEN, HIDDEN, generator=g).t()  # non-contiguous
        for norm in ("layernorm_before", "layernorm_after"):
            sd[prefix + norm + ".weight"] = torch.ones(HIDDEN)
            sd[prefix + norm + ".bias"] = torch.zeros(HIDDEN)
    sd["vit.encoder.layer.0.attention.attention.query.weight"] = sd[
        "vit.encoder.layer.0.attention.attention.query.weight"].half()
    sd["vit.encoder.layer.1.intermediate.dense.weight"] = sd["vit.encoder.layer.1.intermediate.dense.weight"].bfloat16()
    # Views of one storage: the second starts HIDDEN*HIDDEN elements in; a column slice is non-contiguous.
    fused = torch.randn(3 * HIDDEN, HIDDEN, generator=g)
    sd["fused.qkv"] = fused
    sd["fused.q"] = fused[:HIDDEN]
    sd["fused.k"] = fused[HIDDEN:2 * HIDDEN]
    sd["fused.columns"] = fused[:, 3:7]
    sd["vit.embeddings.position_ids"] = torch.arange(5).expand((2, -1))  # int64, stride 0
    sd["vit.layernorm.weight"] = torch.randn(HIDDEN, generator=g).double()
    sd["classifier.weight"] = torch.randn(14, HIDDEN, generator=g)
    sd["classifier.bias"] = torch.zeros(14)
    sd["num_batches_tracked"] = torch.tensor(7)
    sd["empty"] = torch.zeros(0, 4)
    sd["mask"] = torch.tensor([True, False, True])
    return sd


def expected_bytes(tensor):
    tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return tensor.numpy().tobytes()


def storage_zip(path, pickle_bytes, records, prefix="archive/"):
    """A zip laid out as torch.save lays it out, holding any pickle."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(prefix + "data.pkl", pickle_bytes)
        for name, data in records.items():
            z.writestr(prefix + "data/" + name, data)
        z.writestr(prefix + "version", "3\n")


class FakeStorage:
    def __init__(self, key, numel, storage_type=torch.FloatStorage):
        self.key, self.numel, self.storage_type = key, numel, storage_type


class TensorSpec:
    """Pickles exactly as torch's own tensor reduction does, with whatever offset, size and stride we like."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride)

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args + (False, collections.OrderedDict()))


class StoragePickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, FakeStorage):
            return ("storage", obj.storage_type, obj.key, "cpu", obj.numel)
        return None


def crafted_pickle(obj):
    buffer = io.BytesIO()
    StoragePickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


class Payload:
    """What an attacker puts in a checkpoint: a reduce that runs a shell command."""

    def __init__(self, function, argument):
        self.function, self.argument = function, argument

    def __reduce__(self):
        return (self.function, (self.argument,))


class PytorchBinTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="vitpipe-ptbin-")
        self.dir = self.tmp.name
        self.marker = os.path.join(self.dir, "PWNED")

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, checkpoint):
        out = self.path("dump-" + os.path.basename(checkpoint))
        result = subprocess.run([DUMP, checkpoint, out], capture_output=True, text=True, timeout=60)
        manifest = None
        if result.returncode == 0:
            with open(os.path.join(out, "manifest.json")) as f:
                manifest = json.load(f)
            for entry in manifest.values():
                with open(os.path.join(out, entry["file"]), "rb") as f:
                    entry["bytes"] = f.read()
        return result, manifest

    def assert_matches(self, checkpoint, state_dict):
        result, manifest = self.read(checkpoint)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(manifest), sorted(state_dict))
        for name, tensor in state_dict.items():
            entry = manifest[name]
            self.assertEqual(entry["dtype"], DTYPE_NAMES[tensor.dtype], name)
            self.assertEqual(entry["shape"], list(tensor.shape), name)
            self.assertEqual(entry["bytes"], expected_bytes(tensor), name)
        return manifest

    def assert_refused(self, checkpoint, *phrases):
        result, _ = self.read(checkpoint)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertTrue(result.stderr.startswith("error: " + checkpoint), result.stderr)
        for phrase in phrases:
            self.assertIn(phrase, result.stderr)
        self.assertFalse(os.path.exists(self.marker), "the checkpoint ran code")
        return result.stderr

    def assert_torch_would_run_it(self, checkpoint):
        """Control: torch.load (no weights_only in torch 1.13) does execute the payload, so the file is live."""
        self.assertFalse(os.path.exists(self.marker))
        subprocess.run([sys.executable, "-c", "import sys, torch; torch.load(sys.argv[1])", checkpoint],
                       capture_output=True, timeout=60)
        self.assertTrue(os.path.exists(self.marker), "the hostile file is not live; the test proves nothing")

    # --- files torch wrote ---
    def test_zip_formats_match_torch(self):
        sd = vit_like_state_dict()
        named = self.path("pytorch_model.bin")
        torch.save(sd, named)  # top-level folder named after the file
        buffer = io.BytesIO()
        torch.save(sd, buffer)  # top-level folder "archive"
        archive = self.path("from_buffer.bin")
        with open(archive, "wb") as f:
            f.write(buffer.getvalue())
        prefixes = {zipfile.ZipFile(p).namelist()[0].split("/")[0] for p in (named, archive)}
        self.assertEqual(len(prefixes), 2, prefixes)  # both layouts really are covered
        for checkpoint in (named, archive):
            manifest = self.assert_matches(checkpoint, sd)
            # Tensors that shared a storage in Python share it here, at the right offsets.
            base = manifest["fused.qkv"]["address"]
            self.assertEqual(manifest["fused.q"]["address"], base)
            self.assertEqual(manifest["fused.k"]["address"], base + HIDDEN * HIDDEN * 4)
        params = collections.OrderedDict((k, torch.nn.Parameter(v, requires_grad=False))
                                         for k, v in sd.items() if v.is_floating_point())
        torch.save(params, self.path("parameters.bin"))  # _rebuild_parameter
        self.assert_matches(self.path("parameters.bin"), params)
        torch.save(sd, self.path("protocol4.bin"), pickle_protocol=4)  # FRAME, MEMOIZE, SHORT_BINUNICODE
        self.assert_matches(self.path("protocol4.bin"), sd)

    def test_legacy_format_matches_torch(self):
        sd = vit_like_state_dict()
        legacy = self.path("legacy.bin")
        torch.save(sd, legacy, _use_new_zipfile_serialization=False)
        self.assertFalse(zipfile.is_zipfile(legacy))
        manifest = self.assert_matches(legacy, sd)
        self.assertEqual(manifest["fused.q"]["address"], manifest["fused.qkv"]["address"])

    def test_sharded_index_matches_torch(self):
        sd = vit_like_state_dict()
        names = list(sd)
        shards = {"pytorch_model-00001-of-00002.bin": names[: len(names) // 2],
                  "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
        weight_map = {}
        for shard, shard_names in shards.items():
            torch.save(collections.OrderedDict((n, sd[n]) for n in shard_names), self.path(shard))
            weight_map.update({n: shard for n in shard_names})
        index = self.path("pytorch_model.bin.index.json")
        with open(index, "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
        self.assert_matches(index, sd)
        # An index naming a tensor its shard lacks, or a shard outside the folder, is refused.
        with open(index, "w") as f:
            json.dump({"weight_map": dict(weight_map, ghost="pytorch_model-00001-of-00002.bin")}, f)
        self.assert_refused(index, "tensor 'ghost' is listed in pytorch_model-00001-of-00002.bin")
        with open(index, "w") as f:
            json.dump({"weight_map": {"x": "../elsewhere.bin"}}, f)
        self.assert_refused(index, "is not a file name in the index's directory")

    def test_dtypes_and_shapes(self):
        sd = collections.OrderedDict()
        for dtype in DTYPE_NAMES:
            sd[str(dtype)] = (torch.arange(24).reshape(2, 3, 4) % 7).to(dtype)
        sd["permuted"] = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).permute(2, 0, 1)
        sd["sliced"] = torch.arange(100, dtype=torch.float64).reshape(10, 10)[2:8:3, 1::4]
        sd["huge_values"] = torch.tensor([3.0e38, -6.0e-8, float("inf")], dtype=torch.float16)
        for zip_format in (True, False):
            path = self.path(f"dtypes-{zip_format}.bin")
            torch.save(sd, path, _use_new_zipfile_serialization=zip_format)
            self.assert_matches(path, sd)

    def test_torch2_layout(self):
        """What torch 2.x writes and torch 1.13 cannot: tensors wrapped in _rebuild_from_type_v2, a byteorder record,
        .data/serialization_id, the 7-argument _rebuild_tensor_v2."""
        data = np.arange(6, dtype=np.float32).tobytes()
        storage = FakeStorage("0", 6)

        class Wrapped:
            def __init__(self, cls, args):
                self.cls, self.args = cls, args

            def __reduce__(self):
                return (torch._tensor._rebuild_from_type_v2, (torch._utils._rebuild_tensor_v2, self.cls, self.args, {}))

        hooks = collections.OrderedDict()
        state = collections.OrderedDict(
            plain=Wrapped(torch.Tensor, (storage, 0, (2, 3), (3, 1), False, hooks, {})),
            param=Wrapped(torch.nn.parameter.Parameter, (storage, 3, (3,), (1,), False, hooks)))
        path = self.path("torch2.bin")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", crafted_pickle(state))
            z.writestr("archive/byteorder", "little")
            z.writestr("archive/data/0", data)
            z.writestr("archive/version", "3\n")
            z.writestr("archive/.data/serialization_id", "1234")
        result, manifest = self.read(path)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(manifest["plain"]["shape"], [2, 3])
        self.assertEqual(np.frombuffer(manifest["plain"]["bytes"], np.float32).tolist(), [0, 1, 2, 3, 4, 5])
        self.assertEqual(np.frombuffer(manifest["param"]["bytes"], np.float32).tolist(), [3, 4, 5])

        with zipfile.ZipFile(self.path("big_endian.bin"), "w") as z:
            z.writestr("archive/data.pkl", crafted_pickle(state))
            z.writestr("archive/byteorder", "big")
            z.writestr("archive/data/0", data)
        self.assert_refused(self.path("big_endian.bin"), "saved on a big-endian machine")
        odd = collections.OrderedDict(x=Wrapped(collections.OrderedDict, (storage, 0, (2,), (1,), False, hooks)))
        storage_zip(self.path("odd_type.bin"), crafted_pickle(odd), {"0": data})
        self.assert_refused(self.path("odd_type.bin"), "only torch.Tensor and torch.nn.Parameter are supported")

    # --- hostile files ---
    def test_hostile_reduce_os_system(self):
        path = self.path("evil.bin")
        torch.save({"weight": torch.ones(2), "bias": Payload(os.system, f"touch {self.marker}")}, path)
        message = self.assert_refused(path, "refusing global posix.system", "torch.load would call it")
        self.assertIn("data.pkl", message)
        legacy = self.path("evil-legacy.bin")
        torch.save({"bias": Payload(os.system, f"touch {self.marker}")}, legacy, _use_new_zipfile_serialization=False)
        self.assert_refused(legacy, "refusing global posix.system")
        self.assert_torch_would_run_it(path)

    def test_hostile_builtins_eval(self):
        path = self.path("eval.bin")
        code = f"open({self.marker!r}, 'w').write('x')"
        torch.save(collections.OrderedDict(w=torch.ones(1), x=Payload(eval, code)), path)
        self.assert_refused(path, "refusing global __builtin__.eval")  # protocol 2 spells builtins so
        # Through the stack-global opcode of protocol 4 as well.
        torch.save(collections.OrderedDict(x=Payload(eval, code)), self.path("eval4.bin"), pickle_protocol=4)
        self.assert_refused(self.path("eval4.bin"), "refusing global builtins.eval")
        self.assert_torch_would_run_it(path)

    def test_hostile_unknown_torch_global(self):
        torch.save({"w": torch.ones(3, 3).to_sparse()}, self.path("sparse.bin"))
        self.assert_refused(self.path("sparse.bin"), "refusing global torch._utils._rebuild_sparse_tensor",
                            "sparse, quantized and custom tensor types are not supported")
        torch.save(torch.nn.Linear(2, 2), self.path("module.bin"))  # a whole model, not a state dict
        self.assert_refused(self.path("module.bin"), "refusing global torch.nn.modules.linear.Linear")
        torch.save({"w": Payload(torch.load, "/etc/passwd")}, self.path("load.bin"))
        self.assert_refused(self.path("load.bin"), "refusing global torch.serialization.load")
        torch.save({"w": torch.ones(2, dtype=torch.int16)}, self.path("int16.bin"))
        self.assert_refused(self.path("int16.bin"), "tensor storage type torch.ShortStorage is not supported")

    def test_hostile_recursion_bombs(self):
        depth = 1_000_000
        bombs = {
            "marks.bin": (b"\x80\x02" + b"(" * depth + b".", "MARKs nested more than"),
            "lists.bin": (b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".", "holds a list, not a state dict"),
            "dict_of_lists.bin": (b"\x80\x02}X\x01\x00\x00\x00w" + b"]" * depth + b"a" * (depth - 1) + b"s.",
                                  "entry 'w' is a list, not a tensor"),
            "self_reference.bin": (b"\x80\x02]q\x00h\x00a.", "holds a list"),  # a list containing itself
        }
        for name, (pickle_bytes, phrase) in bombs.items():
            storage_zip(self.path(name), pickle_bytes, {})
            self.assert_refused(self.path(name), phrase)
        # The opcodes that build arbitrary objects are refused outright.
        for name, pickle_bytes, phrase in (
                ("inst.bin", b"\x80\x02(iposix\nsystem\n.", "opcode INST is not allowed"),
                ("newobj.bin", b"\x80\x02ccollections\nOrderedDict\n)\x81.", "opcode NEWOBJ is not allowed"),
                ("ext.bin", b"\x80\x02\x82\x01.", "opcode EXT1 is not allowed"),
                ("garbage.bin", b"\x80\x02\xff.", "unknown pickle opcode 0xff"),
                ("no_stop.bin", b"\x80\x02}", "ends without a STOP")):
            storage_zip(self.path(name), pickle_bytes, {})
            self.assert_refused(self.path(name), phrase)

    def test_hostile_out_of_bounds_storage(self):
        data = np.arange(4, dtype=np.float32).tobytes()  # a storage of 4 floats

        def checkpoint(name, spec, numel=4, records=None):
            storage = FakeStorage("0", numel)
            args = (storage,) + spec
            storage_zip(self.path(name), crafted_pickle({"w": TensorSpec(*args)}),
                        {"0": data} if records is None else records)
            return self.path(name)

        # The crafting itself is sound: an in-bounds view reads back right.
        result, manifest = self.read(checkpoint("ok.bin", (1, (2,), (2,))))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(np.frombuffer(manifest["w"]["bytes"], np.float32).tolist(), [1.0, 3.0])

        self.assert_refused(checkpoint("offset.bin", (9, (2,), (1,))), "reaches element 10",
                            "holds only 4 elements")
        self.assert_refused(checkpoint("extent.bin", (0, (2, 3), (3, 1))), "reaches element 5")
        self.assert_refused(checkpoint("negative.bin", (-1, (2,), (1,))), "negative storage offset")
        self.assert_refused(checkpoint("negative_stride.bin", (3, (2,), (-1,))), "negative size or stride")
        self.assert_refused(checkpoint("overflow.bin", (0, (2 ** 62, 8), (1, 1))), "overflows")
        self.assert_refused(checkpoint("expand.bin", (0, (2 ** 20, 2 ** 20), (0, 0))),
                            "more than twice the 16 bytes of storage")
        self.assert_refused(checkpoint("short_record.bin", (0, (2,), (1,)), numel=100),
                            "record 'archive/data/0' holds 16 bytes but the pickle describes 400")
        self.assert_refused(checkpoint("no_record.bin", (0, (2,), (1,)), records={}),
                            "record 'archive/data/0' is missing")
        self.assert_refused(checkpoint("rank_mismatch.bin", (0, (2, 2), (1,))), "size has 2 dimensions but stride has 1")

    def test_truncated_files(self):
        sd = vit_like_state_dict()
        whole = self.path("whole.bin")
        torch.save(sd, whole)
        with open(whole, "rb") as f:
            data = f.read()
        for fraction in (0.5, 0.95):
            cut = self.path(f"cut-{fraction}.bin")
            with open(cut, "wb") as f:
                f.write(data[: int(len(data) * fraction)])
            self.assert_refused(cut, "not a readable zip archive (truncated or corrupted?)")
        # One flipped byte inside a stored tensor: the zip's CRC catches it.
        flipped = bytearray(data)
        info = zipfile.ZipFile(whole).getinfo("whole/data/0")
        name_length = int.from_bytes(data[info.header_offset + 26: info.header_offset + 28], "little")
        extra_length = int.from_bytes(data[info.header_offset + 28: info.header_offset + 30], "little")
        position = info.header_offset + 30 + name_length + extra_length + 8  # in the local header's data
        flipped[position] ^= 0xFF
        with open(self.path("flipped.bin"), "wb") as f:
            f.write(bytes(flipped))
        self.assert_refused(self.path("flipped.bin"), "record 'whole/data/0' is corrupted")

        legacy = self.path("legacy.bin")
        torch.save(sd, legacy, _use_new_zipfile_serialization=False)
        with open(legacy, "rb") as f:
            data = f.read()
        for size, phrase in ((len(data) - 10, "truncated"), (300, "truncated"), (0, "not a PyTorch checkpoint")):
            cut = self.path(f"legacy-{size}.bin")
            with open(cut, "wb") as f:
                f.write(data[:size])
            self.assert_refused(cut, phrase)
        with open(self.path("text.bin"), "w") as f:
            f.write("version https://git-lfs.github.com/spec/v1\n")  # an LFS pointer, not the weights
        self.assert_refused(self.path("text.bin"), "not a PyTorch checkpoint")

    def test_hostile_record_sizes(self):
        # Found by tools/fuzz (fuzz_pytorch_bin): a stored record whose zip headers claim 4 GB made the reader
        # allocate 4 GB before reading a byte. Claimed sizes are now checked against the archive first.
        whole = self.path("whole.bin")
        torch.save(vit_like_state_dict(), whole)
        with open(whole, "rb") as f:
            data = f.read()
        claimed = 4_160_750_111
        out = bytearray(data)
        position = data.find(b"PK\x01\x02")
        while position >= 0:  # the central directory's entry for data.pkl (libzip's consistency check passes)
            name_length = int.from_bytes(data[position + 28: position + 30], "little")
            if data[position + 46: position + 46 + name_length] == b"whole/data.pkl":
                out[position + 24: position + 28] = claimed.to_bytes(4, "little")
            position = data.find(b"PK\x01\x02", position + 1)
        with open(self.path("claims_4gb.bin"), "wb") as f:
            f.write(bytes(out))
        self.assert_refused(self.path("claims_4gb.bin"),
                            f"record 'whole/data.pkl' claims {claimed} bytes, more than the whole archive "
                            f"({len(data)} bytes)")


if __name__ == "__main__":
    unittest.main()
