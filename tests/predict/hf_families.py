"""transformers' DeiTImageProcessor and BitImageProcessor (DINOv2, RAD-DINO), transcribed (transformers is not
installable here), plus loading a DeiT / DINOv2 / DINOv2-with-registers checkpoint for the model transcription in
tests/model/reference_families.py.

Read from transformers' sources: models/deit/image_processing_deit.py, models/bit/image_processing_bit.py,
image_transforms.py (get_resize_output_image_size, resize, center_crop), image_processing_utils.get_size_dict.

  Processor.from_file(json)    the processor class named by image_processor_type / feature_extractor_type, with its
                               __init__ defaults for absent fields
  Processor.preprocess(img)    pixel_values [3, H, W] float32: resize (Pillow) -> center_crop (numpy) -> rescale ->
                               normalize
  load_pretrained(dir, dtype)  the state dict (strict: every key the config implies, no other) and the
                               configuration reference_families.forward reads
"""
import json
import math
import os
import sys

import numpy as np
import PIL.Image
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "model"))
sys.path.insert(0, os.path.join(HERE, "..", "io"))
import hf_vit  # noqa: E402  (load_image, rescale, normalize: ViTImageProcessor's steps)
import reference_families  # noqa: E402
from hf_reference import read_sharded  # noqa: E402

IMAGENET_STANDARD = [0.5, 0.5, 0.5]
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def get_size_dict(size, default_to_square=True):
    """image_processing_utils.get_size_dict: an int is a square, or (default_to_square=False) a shortest edge."""
    if isinstance(size, int):
        return {"height": size, "width": size} if default_to_square else {"shortest_edge": size}
    return dict(size)


def resize_output_size(height, width, size):
    """image_transforms.get_resize_output_image_size for a size dict -> (height, width)."""
    if "shortest_edge" in size:
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = size["shortest_edge"], int(size["shortest_edge"] * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)
    return size["height"], size["width"]


def center_crop(image, height, width):
    """image_transforms.center_crop on an HWC array (zero padding when the image is smaller than the crop)."""
    orig_h, orig_w = image.shape[:2]
    top = (orig_h - height) // 2
    left = (orig_w - width) // 2
    if top >= 0 and left >= 0 and top + height <= orig_h and left + width <= orig_w:
        return image[top:top + height, left:left + width]
    new_h, new_w = max(height, orig_h), max(width, orig_w)
    canvas = np.zeros((new_h, new_w) + image.shape[2:], dtype=image.dtype)
    top_pad, left_pad = math.ceil((new_h - orig_h) / 2), math.ceil((new_w - orig_w) / 2)
    canvas[top_pad:top_pad + orig_h, left_pad:left_pad + orig_w] = image
    top, left = top + top_pad, left + left_pad
    return canvas[max(0, top):min(new_h, top + height), max(0, left):min(new_w, left + width)]


class Processor:
    def __init__(self, j):
        kind = j.get("image_processor_type") or j.get("feature_extractor_type", "ViTImageProcessor")
        kind = kind.replace("FeatureExtractor", "ImageProcessor")
        bit, deit = kind == "BitImageProcessor", kind == "DeiTImageProcessor"
        assert bit or deit, kind
        self.do_resize = j.get("do_resize", True)
        default_size = {"shortest_edge": 224} if bit else {"height": 256, "width": 256}
        self.size = get_size_dict(j.get("size", default_size), default_to_square=not bit)
        self.resample = j.get("resample", PIL.Image.BICUBIC)
        self.do_center_crop = j.get("do_center_crop", True)
        self.crop_size = get_size_dict(j.get("crop_size", {"height": 224, "width": 224}))
        self.do_rescale = j.get("do_rescale", True)
        self.rescale_factor = j.get("rescale_factor", 1 / 255)
        self.do_normalize = j.get("do_normalize", True)
        self.image_mean = j.get("image_mean", OPENAI_CLIP_MEAN if bit else IMAGENET_STANDARD)
        self.image_std = j.get("image_std", OPENAI_CLIP_STD if bit else IMAGENET_STANDARD)

    @staticmethod
    def from_file(path):
        with open(path) as f:
            return Processor(json.load(f))

    def preprocess(self, image):
        array = np.array(image)  # do_convert_rgb: load_image already gave RGB
        if self.do_resize:
            h, w = resize_output_size(array.shape[0], array.shape[1], self.size)
            array = np.array(PIL.Image.fromarray(array).resize((w, h), resample=self.resample, reducing_gap=None))
        if self.do_center_crop:
            array = center_crop(array, self.crop_size["height"], self.crop_size["width"])
        if self.do_rescale:
            array = hf_vit.rescale(array, self.rescale_factor)
        if self.do_normalize:
            array = hf_vit.normalize(array, self.image_mean, self.image_std)
        return np.ascontiguousarray(array.transpose(2, 0, 1))


def load_pretrained(directory, dtype=torch.float32):
    """(parameters, cfg) for reference_families.forward; every key the config implies must be there, no other."""
    with open(os.path.join(directory, "config.json")) as f:
        j = json.load(f)
    model_type = j["model_type"]
    params = {k: v.to(dtype) for k, v in read_sharded(directory).items()}
    cfg = {"hidden": j["hidden_size"], "heads": j["num_attention_heads"], "layers": j["num_hidden_layers"],
           "patch": j["patch_size"], "eps": j["layer_norm_eps"], "problem": "multi", "model_type": model_type,
           "registers": j.get("num_register_tokens", 0) if model_type == "dinov2_with_registers" else 0,
           "swiglu": j.get("use_swiglu_ffn", False), "lora_scale": 0.0}
    return params, cfg, j


def logits(params, cfg, pixel_values):
    with torch.no_grad():
        return reference_families.forward(params, pixel_values, None, cfg)[0]
