"""Model directories that ship only pytorch_model.bin (or its sharded index) load through load_model tensor for
tensor, as many medical models on the Hub do. Uses the io layer's torch model with Hugging Face's ViT module names
(tests/io/hf_reference.py) and its C++ probe (IO_PROBE: load_model then save_model to safetensors)."""

import collections
import json
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io"))
from hf_reference import Cfg, ViTForImageClassification, ViTModel, config_json, probe, randomize, read_sharded, temp_dir  # noqa: E402,E501

LABELS = ["effusion", "nodule", "mass"]


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


class ModelDirectoryBinTest(unittest.TestCase):
    def setUp(self):
        self.root = temp_dir()
        self.cfg = Cfg(num_labels=len(LABELS))

    def directory(self, name, config_text):
        d = os.path.join(self.root, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config_text)
        return d

    def load(self, d, *options):
        out = d + "_out"
        summary = json.loads(probe("load", d, out, *options).stdout)
        return summary, read_sharded(out)

    def test_pytorch_model_bin_formats_load_like_safetensors(self):
        state = randomize(ViTForImageClassification(self.cfg), 11).state_dict()
        for name, save in (("zip", lambda s, p: torch.save(s, p)),
                           ("legacy", lambda s, p: torch.save(s, p, _use_new_zipfile_serialization=False))):
            d = self.directory(name, config_json(self.cfg, LABELS))
            save(state, os.path.join(d, "pytorch_model.bin"))
            summary, tensors = self.load(d)
            self.assertEqual(summary["weights_file"], "pytorch_model.bin")
            self.assertFalse(summary["fresh_head"])
            self.assertEqual(set(tensors), set(state))
            for key, tensor in state.items():
                self.assertTrue(same(tensors[key], tensor), f"{name}: {key}")

    def test_sharded_bin_index(self):
        state = randomize(ViTForImageClassification(self.cfg), 12).state_dict()
        d = self.directory("sharded", config_json(self.cfg, LABELS))
        names = list(state)
        shards = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
        weight_map = {}
        for file, keys in shards.items():
            torch.save(collections.OrderedDict((k, state[k]) for k in keys), os.path.join(d, file))
            weight_map.update({k: file for k in keys})
        with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
        summary, tensors = self.load(d)
        self.assertEqual(summary["weights_file"], "pytorch_model.bin.index.json")
        for key, tensor in state.items():
            self.assertTrue(same(tensors[key], tensor), key)

    def test_bf16_backbone_bin_gets_a_fresh_head(self):
        backbone = randomize(ViTModel(self.cfg), 13).to(torch.bfloat16)
        state = backbone.state_dict()
        d = self.directory("backbone", config_json(self.cfg, None, architectures=["ViTModel"]))
        torch.save(state, os.path.join(d, "pytorch_model.bin"))
        summary, tensors = self.load(d, "--labels", "a,b", "--allow-fresh-head")
        self.assertTrue(summary["fresh_head"])
        for key, tensor in state.items():
            if not key.startswith("pooler."):
                self.assertTrue(same(tensors["vit." + key], tensor.float()), key)

    def test_safetensors_preferred_and_hostile_bin_refused(self):
        state = randomize(ViTForImageClassification(self.cfg), 14).state_dict()
        d = self.directory("hostile", config_json(self.cfg, LABELS))

        class Payload:
            def __reduce__(self):
                return (os.system, ("touch " + os.path.join(d, "PWNED"),))

        torch.save(dict(state, extra=Payload()), os.path.join(d, "pytorch_model.bin"))
        result = probe("load", d, "-", expect_ok=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("refusing global posix.system", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "PWNED")))


if __name__ == "__main__":
    unittest.main()
