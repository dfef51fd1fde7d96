"""transformers' ViTImageProcessor and ViTForImageClassification, transcribed (transformers is not installable here).

Read from transformers' own sources (4.45+: models/vit/image_processing_vit.py, image_transforms.py, image_utils.py,
models/vit/modeling_vit.py) and kept as close to them as torch 1.13 allows, so that a difference from vitpipe is
vitpipe's. Only inference is transcribed (eval: dropout is the identity, no head mask, eager attention).

  load_image(path)                     image_utils.load_image: PIL.Image.open, ImageOps.exif_transpose, convert("RGB")
  ImageProcessor.from_file(json)       ViTImageProcessor(**preprocessor_config.json) (size: get_size_dict)
  ImageProcessor.preprocess(img, size) pixel_values [3, H, W] float32: resize (Pillow) -> rescale -> normalize
  ViTForImageClassification(cfg)       the modules, with transformers' names; forward(pixel_values,
                                       interpolate_pos_encoding) -> logits
  load_pretrained(dir, dtype)          from_pretrained: config.json + model.safetensors (or index + shards), keys
                                       renamed as transformers does (gamma/beta), strict load, cast to dtype
  pipeline_scores(logits, cfg)         image-classification pipeline's function_to_apply (sigmoid / softmax)
"""
import json
import os
import sys

import numpy as np
import PIL.Image
import PIL.ImageOps
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io"))
from hf_reference import read_sharded  # noqa: E402  (independent safetensors reader: struct + json + numpy)

IMAGENET_STANDARD_MEAN = [0.5, 0.5, 0.5]
IMAGENET_STANDARD_STD = [0.5, 0.5, 0.5]


# --- image_utils / image_transforms / ViTImageProcessor ------------------------------------------------------------

def load_image(path):
    image = PIL.Image.open(path)
    image = PIL.ImageOps.exif_transpose(image)
    return image.convert("RGB")


def get_size_dict(size):
    """image_processing_utils.get_size_dict for ViT (default_to_square=True): int -> square; dict kept."""
    if isinstance(size, int):
        return {"height": size, "width": size}
    if isinstance(size, (tuple, list)):
        return {"height": size[0], "width": size[1]}
    return dict(size)


def rescale(image, scale, dtype=np.float32):
    rescaled = image.astype(np.float64) * scale  # "Numpy type promotion has changed, so always upcast first"
    return rescaled.astype(dtype)


def normalize(image, mean, std):
    """Channels-last image; mean/std become arrays of the image's dtype (float32 after rescale)."""
    if not np.issubdtype(image.dtype, np.floating):
        image = image.astype(np.float32)
    num_channels = image.shape[-1]
    mean = mean if isinstance(mean, (list, tuple)) else [mean] * num_channels
    std = std if isinstance(std, (list, tuple)) else [std] * num_channels
    mean = np.array(mean, dtype=image.dtype)
    std = np.array(std, dtype=image.dtype)
    return (image - mean) / std


class ImageProcessor:
    def __init__(self, do_resize=True, size=None, resample=PIL.Image.BILINEAR, do_rescale=True, rescale_factor=1 / 255,
                 do_normalize=True, image_mean=None, image_std=None, **kwargs):
        self.do_resize = do_resize
        self.size = get_size_dict(size if size is not None else {"height": 224, "width": 224})
        self.resample = resample
        self.do_rescale = do_rescale
        self.rescale_factor = rescale_factor
        self.do_normalize = do_normalize
        self.image_mean = image_mean if image_mean is not None else IMAGENET_STANDARD_MEAN
        self.image_std = image_std if image_std is not None else IMAGENET_STANDARD_STD

    @staticmethod
    def from_file(path):
        with open(path) as f:
            return ImageProcessor(**json.load(f))

    def preprocess(self, image, size=None):
        """One PIL RGB image -> pixel_values [3, H, W] float32 (numpy). `size`: {"height", "width"} override."""
        size = get_size_dict(size) if size is not None else self.size
        array = np.array(image)  # to_numpy_array: HWC uint8
        if self.do_resize:
            # image_transforms.resize: uint8 -> PIL.Image.fromarray (no rescale) -> Image.resize((w, h)) -> numpy
            pil = PIL.Image.fromarray(array)
            array = np.array(pil.resize((size["width"], size["height"]), resample=self.resample, reducing_gap=None))
        if self.do_rescale:
            array = rescale(array, self.rescale_factor)
        if self.do_normalize:
            array = normalize(array, self.image_mean, self.image_std)
        return np.ascontiguousarray(array.transpose(2, 0, 1))


# --- modeling_vit ---------------------------------------------------------------------------------------------------

class Config:
    """The ViTConfig fields the model reads, from config.json (PretrainedConfig defaults where absent)."""

    def __init__(self, j):
        self.hidden_size = j.get("hidden_size", 768)
        self.num_hidden_layers = j.get("num_hidden_layers", 12)
        self.num_attention_heads = j.get("num_attention_heads", 12)
        self.intermediate_size = j.get("intermediate_size", 3072)
        self.hidden_act = j.get("hidden_act", "gelu")
        self.layer_norm_eps = j.get("layer_norm_eps", 1e-12)
        self.image_size = j.get("image_size", 224)
        self.patch_size = j.get("patch_size", 16)
        self.num_channels = j.get("num_channels", 3)
        self.qkv_bias = j.get("qkv_bias", True)
        if "id2label" in j:
            self.id2label = {int(k): v for k, v in j["id2label"].items()}
        else:
            n = j.get("num_labels", 2)
            self.id2label = {i: f"LABEL_{i}" for i in range(n)}
        self.num_labels = len(self.id2label)
        self.problem_type = j.get("problem_type")
        assert self.hidden_act == "gelu", "the transcription covers exact GELU only"

    @staticmethod
    def from_file(path):
        with open(path) as f:
            return Config(json.load(f))


class ViTPatchEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.image_size = (config.image_size, config.image_size)
        self.patch_size = (config.patch_size, config.patch_size)
        self.num_channels = config.num_channels
        self.num_patches = (config.image_size // config.patch_size) ** 2
        self.projection = nn.Conv2d(config.num_channels, config.hidden_size, kernel_size=config.patch_size,
                                    stride=config.patch_size)

    def forward(self, pixel_values, interpolate_pos_encoding=False):
        batch_size, num_channels, height, width = pixel_values.shape
        if num_channels != self.num_channels:
            raise ValueError(f"Expected {self.num_channels} channels but got {num_channels}.")
        if not interpolate_pos_encoding and (height != self.image_size[0] or width != self.image_size[1]):
            raise ValueError(f"Input image size ({height}*{width}) doesn't match model ({self.image_size}).")
        return self.projection(pixel_values).flatten(2).transpose(1, 2)


class ViTEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, config.hidden_size))
        self.patch_embeddings = ViTPatchEmbeddings(config)
        num_patches = self.patch_embeddings.num_patches
        self.position_embeddings = nn.Parameter(torch.randn(1, num_patches + 1, config.hidden_size))
        self.patch_size = config.patch_size

    def interpolate_pos_encoding(self, embeddings, height, width):
        num_patches = embeddings.shape[1] - 1
        num_positions = self.position_embeddings.shape[1] - 1
        if num_patches == num_positions and height == width:
            return self.position_embeddings
        class_pos_embed = self.position_embeddings[:, :1]
        patch_pos_embed = self.position_embeddings[:, 1:]
        dim = embeddings.shape[-1]
        new_height = height // self.patch_size
        new_width = width // self.patch_size
        sqrt_num_positions = int(num_positions ** 0.5)
        patch_pos_embed = patch_pos_embed.reshape(1, sqrt_num_positions, sqrt_num_positions, dim)
        patch_pos_embed = patch_pos_embed.permute(0, 3, 1, 2)
        patch_pos_embed = nn.functional.interpolate(patch_pos_embed, size=(new_height, new_width), mode="bicubic",
                                                    align_corners=False)
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((class_pos_embed, patch_pos_embed), dim=1)

    def forward(self, pixel_values, interpolate_pos_encoding=False):
        batch_size, num_channels, height, width = pixel_values.shape
        embeddings = self.patch_embeddings(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding)
        cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        embeddings = torch.cat((cls_tokens, embeddings), dim=1)
        if interpolate_pos_encoding:
            embeddings = embeddings + self.interpolate_pos_encoding(embeddings, height, width)
        else:
            embeddings = embeddings + self.position_embeddings
        return embeddings


def eager_attention_forward(query, key, value, scaling):
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_output = torch.matmul(attn_weights, value)
    return attn_output.transpose(1, 2).contiguous()


class ViTSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)
        self.key = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)
        self.value = nn.Linear(config.hidden_size, self.all_head_size, bias=config.qkv_bias)
        self.scaling = self.attention_head_size ** -0.5

    def transpose_for_scores(self, x):
        x = x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size))
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        context_layer = eager_attention_forward(query_layer, key_layer, value_layer, self.scaling)
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class ViTSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states):
        return self.dense(hidden_states)


class ViTAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = ViTSelfAttention(config)
        self.output = ViTSelfOutput(config)

    def forward(self, hidden_states):
        return self.output(self.attention(hidden_states))


class ViTIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, hidden_states):
        return nn.functional.gelu(self.dense(hidden_states))  # ACT2FN["gelu"]: exact erf GELU


class ViTOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states, input_tensor):
        return self.dense(hidden_states) + input_tensor


class ViTLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = ViTAttention(config)
        self.intermediate = ViTIntermediate(config)
        self.output = ViTOutput(config)
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states):
        attention_output = self.attention(self.layernorm_before(hidden_states))
        hidden_states = attention_output + hidden_states
        layer_output = self.intermediate(self.layernorm_after(hidden_states))
        return self.output(layer_output, hidden_states)


class ViTEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList([ViTLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states)
        return hidden_states


class ViTModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = ViTEmbeddings(config)
        self.encoder = ViTEncoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, pixel_values, interpolate_pos_encoding=False):
        expected_dtype = self.embeddings.patch_embeddings.projection.weight.dtype
        if pixel_values.dtype != expected_dtype:
            pixel_values = pixel_values.to(expected_dtype)
        embedding_output = self.embeddings(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding)
        return self.layernorm(self.encoder(embedding_output))


class ViTForImageClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.vit = ViTModel(config)  # add_pooling_layer=False
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    @torch.no_grad()
    def forward(self, pixel_values, interpolate_pos_encoding=False):
        sequence_output = self.vit(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding)
        return self.classifier(sequence_output[:, 0, :])


def fix_key(key):
    """PreTrainedModel._fix_key (4.45): legacy LayerNorm names."""
    if "gamma" in key:
        key = key.replace("gamma", "weight")
    if "beta" in key:
        key = key.replace("beta", "bias")
    return key


def load_pretrained(directory, dtype=torch.float32):
    """ViTForImageClassification.from_pretrained(directory) (then .to(dtype)): every key must load (strict)."""
    config = Config.from_file(os.path.join(directory, "config.json"))
    model = ViTForImageClassification(config)
    state = {fix_key(k): v for k, v in read_sharded(directory).items()}
    model.load_state_dict(state, strict=True)  # copies into float32 parameters (F16 files are upcast)
    return model.to(dtype).eval(), config


def pipeline_scores(logits, config):
    """ImageClassificationPipeline.postprocess, function_to_apply by default: sigmoid for multi-label or a single
    label, softmax otherwise."""
    if config.problem_type == "multi_label_classification" or config.num_labels == 1:
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=-1)
