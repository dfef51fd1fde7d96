"""Seed corpora for the harnesses of tools/fuzz, made from the tests' fixtures and the bundled sample (and, for the
pickle readers, files torch.save writes): usage `make_seeds.py OUT_DIR` -> OUT_DIR/<harness>/<seed files>.
Deterministic; needs Debian's python3-torch, python3-pil and python3-numpy (scripts/setup.sh --tests)."""

import gzip
import io
import json
import os
import shutil
import struct
import sys
import zipfile
import zlib

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLE = os.path.join(ROOT, "data", "chestxray14-sample")
CUT = b"\n--8<--\n"  # fuzz_common.h's part separator


def put(out, harness, name, data):
    directory = os.path.join(out, harness)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def head_lines(path, count):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return b"".join(f.readline() for _ in range(count))


def safetensors_bytes(tensors, metadata=None):
    """The format as its reference writer lays it out (transcribed, numpy only)."""
    header, body = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    codes = {np.float32: "F32", np.float16: "F16", np.int64: "I64", np.uint8: "U8"}
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": codes[array.dtype.type], "shape": list(array.shape),
                        "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def tiny_state_dict():
    import torch
    return {"vit.embeddings.cls_token": torch.arange(8, dtype=torch.float32).reshape(1, 1, 8),
            "vit.encoder.layer.0.attention.attention.query.weight": torch.ones(4, 4, dtype=torch.float16),
            "classifier.bias": torch.tensor([1.5, -2.0]),
            "steps": torch.tensor([3], dtype=torch.int64),
            "shared_view": torch.arange(6, dtype=torch.float32)[2:5]}


def main(out):
    shutil.rmtree(out, ignore_errors=True)
    fixtures = os.path.join(ROOT, "tests", "io", "fixtures")

    # safetensors: the committed seeds plus a file vitpipe-style with metadata.
    for name in sorted(os.listdir(os.path.join(ROOT, "tools", "fuzz", "seeds"))):
        put(out, "safetensors", name, open(os.path.join(ROOT, "tools", "fuzz", "seeds", name), "rb").read())
    put(out, "safetensors", "with_metadata.safetensors",
        safetensors_bytes({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], np.int64)},
                          {"format": "pt"}))

    # config.json and preprocessor_config.json of real checkpoints.
    for name in sorted(os.listdir(fixtures)):
        data = open(os.path.join(fixtures, name), "rb").read()
        if name.endswith(".preprocessor_config.json"):
            put(out, "preprocessor_config", name, data)
        elif name.endswith(".config.json"):
            put(out, "hf_config", name, data)
    put(out, "preprocessor_config", "old_int_size.json",
        json.dumps({"feature_extractor_type": "ViTFeatureExtractor", "size": 384, "resample": 2,
                    "image_mean": 0.5, "image_std": [0.5]}))

    # Sharded-weight indexes, as transformers writes them.
    put(out, "weight_index", "safetensors.index.json", json.dumps({
        "metadata": {"total_size": 1234},
        "weight_map": {"vit.embeddings.cls_token": "model-00001-of-00002.safetensors",
                       "classifier.weight": "model-00002-of-00002.safetensors"}}, indent=2))
    put(out, "weight_index", "bin.index.json", json.dumps({
        "metadata": {}, "weight_map": {"classifier.bias": "pytorch_model-00001-of-00001.bin"}}))

    # pytorch_model.bin in both torch formats, and their pickles for the unpickler.
    import torch
    for legacy in (False, True):
        buffer = io.BytesIO()
        torch.save(tiny_state_dict(), buffer, _use_new_zipfile_serialization=not legacy)
        data = buffer.getvalue()
        put(out, "pytorch_bin", "legacy.bin" if legacy else "zip.bin", data)
        if legacy:
            put(out, "unpickler", "legacy_stream.pkl", data)
        else:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                pickle_name = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
                put(out, "unpickler", "zip_data.pkl", archive.read(pickle_name))
    import collections
    import pickle
    put(out, "unpickler", "ordered_dict_protocol2.pkl",
        pickle.dumps(collections.OrderedDict([("a", 1), ("b", [1.5, "x", b"y", None, True, (2, 3)])]), protocol=2))

    # CSVs: the first byte picks fuzz_csv's reader (0 text, 1 gzip, 2 csv: dataset, 3 NIH, 4 list, 5 gzip'd list).
    nih = head_lines(os.path.join(SAMPLE, "Data_Entry_2017_v2020.csv"), 25)
    nih_old = head_lines(os.path.join(ROOT, "tests", "fixtures", "chestxray14", "Data_Entry_2017.csv.gz"), 25)
    listing = head_lines(os.path.join(SAMPLE, "test_list.txt"), 20)
    put(out, "csv", "text.csv", b"\x00" + nih)
    put(out, "csv", "quoted_crlf.csv", b"\x00" + b'a,b,\r\n1,"x, ""y"""\r\n\r\n2,"multi\nline"\r\n')
    put(out, "csv", "gzip.csv.gz", b"\x01" + gzip.compress(nih_old, mtime=0))
    put(out, "csv", "dataset_columns.csv", b"\x02" + b"path,split,red,green\nimages/a.png,train,1,0\nb.png,val,0,1\n")
    put(out, "csv", "dataset_joined.csv", b"\x02" + b"image,label,patient\na.png,Effusion|Mass,1\nb.png,,2\nc.png,Mass,3\n")
    put(out, "csv", "nih_v2020.csv", b"\x03" + nih)
    put(out, "csv", "nih_2017.csv", b"\x03" + nih_old)
    put(out, "csv", "list.txt", b"\x04" + listing)
    put(out, "csv", "list.txt.gz", b"\x05" + gzip.compress(listing, mtime=0))

    # Train options: the first byte picks JSON (0) or YAML (1); texts like tests/train/test_train_options.cpp's.
    put(out, "train_options", "options.yaml", b"\x01" + b"model: ./vit-tiny\ndata: /data/cxr14\noutput_dir: /tmp/out\n"
        b"epochs: 5\nwarmup-steps: 10\nlr: 3e-4\nlayers_per_stage: [3, 3]\npipeline_stages: 2\n"
        b"aug_crop_scale: [0.5, 1]\naug_hflip: yes\ntrace: ~\n")
    put(out, "train_options", "options.json", b"\x00" + json.dumps({
        "model": "m", "data": "d", "output-dir": "o", "max_steps": 7, "batch_size": 6, "micro-batch-size": 3,
        "optimizer": "lamb", "clip_grad_norm": 0.5, "layers_per_stage": "1,1,1", "pipeline_stages": 3,
        "test": True, "seed": 0, "aug_crop_scale": None}).encode())

    # The packed cache: index.json under a matching manifest (0), a manifest as is (1) or corrected (2).
    index = {"names": ["a.png", "b.png"], "labels": [[0], [1]], "source_split": ["train", "test"],
             "patients": ["1", "2"], "views": ["PA", "AP"], "sexes": ["M", "F"], "ages": [40, 81.5],
             "offsets": [0, 48], "channels": [3, 1],
             "crc32": [zlib.crc32(b"\x7f" * 48), zlib.crc32(b"\x7f" * 16)]}
    put(out, "packed_cache", "index.json", b"\x00" + json.dumps(index).encode())
    manifest = {"format": "vitpipe-packed-cache", "version": 4, "source": "csv:/absent/data.csv", "kind": "csv",
                "image_size": 4, "resample": 2, "label_names": ["x", "y"], "multi_label": True,
                "no_finding_allowed": True, "fingerprint": {"metadata_sha256": "", "images_sha256": "",
                                                            "image_count": 2},
                "images": 2, "gray_images": 1, "pixels_bytes": 352, "index_bytes": 0, "index_sha256": "",
                "skipped_unreadable": [], "missing": []}
    put(out, "packed_cache", "manifest_as_is.json", b"\x01" + json.dumps(manifest, indent=2).encode())
    put(out, "packed_cache", "manifest_corrected.json", b"\x02" + json.dumps(manifest, indent=2).encode())

    # Training checkpoints: trainer_state.json, then optimizer.safetensors over fuzz_training_checkpoint's model
    # (1074 parameters), then checkpoints/latest.
    state = {"step": 1, "epoch": 0, "batch_in_epoch": 1, "total_steps": 10, "best_step": -1, "best_metric": None,
             "options": {"batch_size": 4, "data": "csv:x.csv", "seed": 0}}
    moments = safetensors_bytes({"exp_avg": np.zeros(1074, np.float32), "exp_avg_sq": np.ones(1074, np.float32)},
                                {"format": "pt", "optimizer": "adamw", "step": "1"})
    put(out, "training_checkpoint", "state_only", json.dumps(state, indent=2))
    put(out, "training_checkpoint", "state_and_moments", json.dumps(state).encode() + CUT + moments)
    put(out, "training_checkpoint", "state_moments_latest",
        json.dumps(state).encode() + CUT + moments + CUT + b"step-00000001\n")

    # Images: the bundled sample's PNGs, the JPEG fixtures, and small files of every PNG colour type / JPEG kind.
    from PIL import Image
    for name in sorted(os.listdir(os.path.join(SAMPLE, "images")))[:6]:
        put(out, "png", name, open(os.path.join(SAMPLE, "images", name), "rb").read())
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(9, 7, 4), dtype=np.uint8)
    for mode in ("1", "L", "LA", "RGB", "RGBA", "P", "I;16"):
        image = Image.fromarray(pixels[:, :, :3], "RGB").convert(mode if mode != "I;16" else "I")
        if mode == "I;16":
            image = Image.fromarray((pixels[:, :, 0].astype(np.uint16) * 257), "I;16")
        buffer = io.BytesIO()
        image.save(buffer, "PNG", optimize=False)
        put(out, "png", f"mode_{mode.replace(';', '_')}.png", buffer.getvalue())
    image_fixtures = os.path.join(ROOT, "tests", "image", "fixtures")
    for name in sorted(os.listdir(image_fixtures)):
        if name.endswith(".jpg"):
            put(out, "jpeg", name, open(os.path.join(image_fixtures, name), "rb").read())
    for mode, progressive in (("L", False), ("RGB", False), ("RGB", True)):
        buffer = io.BytesIO()
        Image.fromarray(pixels[:, :, :3], "RGB").convert(mode).save(buffer, "JPEG", quality=80,
                                                                      progressive=progressive)
        put(out, "jpeg", f"{mode}{'_progressive' if progressive else ''}.jpg", buffer.getvalue())

    # DICOM (the decode path of data/dicom_decoder): small files pydicom writes, gray 8/12/16 bits stored (signed
    # and unsigned), MONOCHROME1, rescale and a window, RGB in both planar configurations, two frames, and the
    # deflated and RLE transfer syntaxes (pydicom's own encoders; the DCMTK-compressed ones are check_dicom.py's).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "image"))
    from dicom_files import dicom_file_bytes
    from pydicom.uid import DeflatedExplicitVRLittleEndian, ExplicitVRBigEndian, ImplicitVRLittleEndian, RLELossless

    def dicom_bytes(words, bits_stored, **options):  # a fixed instance UID: the same seeds every run
        return dicom_file_bytes(words, words.dtype.itemsize * 8, bits_stored, instance_uid="1.2.3.4", **options)

    gray8 = rng.integers(0, 256, size=(6, 5), dtype=np.uint8)
    gray16 = rng.integers(0, 4096, size=(6, 5), dtype=np.uint16)
    dicom_seeds = {
        "gray8": lambda: dicom_bytes(gray8, 8),
        "gray12": lambda: dicom_bytes(gray16, 12),
        "gray16_signed": lambda: dicom_bytes(gray16.astype(np.int16) - 2048, 16, signed=True),
        "monochrome1": lambda: dicom_bytes(gray8, 8, photometric="MONOCHROME1"),
        "rescale_window": lambda: dicom_bytes(gray16, 12, RescaleSlope=2, RescaleIntercept=-1024,
                                              WindowCenter=1000, WindowWidth=400),
        "rgb_interleaved": lambda: dicom_bytes(pixels[:6, :5, :3].copy(), 8, photometric="RGB"),
        "rgb_planar": lambda: dicom_bytes(pixels[:6, :5, :3].copy(), 8, photometric="RGB", planar=1),
        "two_frames": lambda: dicom_bytes(np.stack([gray8, gray8[::-1]]), 8, frames=2),
        "implicit_vr": lambda: dicom_bytes(gray16, 12, syntax=ImplicitVRLittleEndian),
        "big_endian": lambda: dicom_bytes(gray16, 12, syntax=ExplicitVRBigEndian),
        "deflated": lambda: dicom_bytes(gray8, 8, syntax=DeflatedExplicitVRLittleEndian),
        "rle": lambda: dicom_bytes(gray16, 12, syntax=RLELossless),
    }
    for name, make in dicom_seeds.items():
        try:
            put(out, "dicom", name + ".dcm", make())
        except Exception as e:  # an encoder this pydicom lacks: one seed fewer, said so
            print(f"make_seeds: DICOM seed {name} not written ({e})", file=sys.stderr)

    multipart_seeds(out)
    http_request_seeds(out)


def http_request_seeds(out):
    """fuzz_http_request: what one client sends on one connection, among them the attacks serve_attacks.py tries."""
    put(out, "http_request", "get", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    put(out, "http_request", "path_not_utf8", b"GET /%FB HTTP/1.1\r\nHost: x\r\n\r\nGET /\xfb\xfe HTTP/1.1\r\n\r\n")
    put(out, "http_request", "method_not_utf8", b"G\xfbT /healthz HTTP/1.1\r\nHost: \xfb\xff\r\n\r\n")
    put(out, "http_request", "param_not_utf8", b"POST /v1/predict?heatmap=%FB HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
    put(out, "http_request", "pipelined_gets", b"GET /healthz HTTP/1.1\r\n\r\nGET /readyz HTTP/1.1\r\n\r\n")
    body = b"GET /stolen HTTP/1.1\r\n\r\n" * 2
    put(out, "http_request", "pipelined_posts",
        b"POST /v1/predict HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body +
        b"POST /v1/predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n" +
        b"GET /healthz HTTP/1.1\r\n\r\n")
    put(out, "http_request", "post_without_length", b"POST /v1/predict HTTP/1.1\r\nHost: x\r\n\r\n")
    put(out, "http_request", "form_data",
        b"POST /v1/predict HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 62\r\n\r\n"
        b"--b\r\nContent-Disposition: form-data; name=\"a\"; filename=\"\xfb\"\r\n\r\nxy\r\n--b--\r\n")


def multipart_seeds(out):
    """fuzz_multipart: the first byte picks a STOW-RS request (0), a boundary and body (1) or a Content-Type (2); then
    the Content-Type (or boundary) line, then the body. DICOM-like parts: NUL preamble, "DICM", CR/LF bytes."""
    def body(boundary, parts, preamble=b"", epilogue=b"", eol=b"\r\n"):
        data = preamble
        for headers, content in parts:
            data += b"--" + boundary + eol + b"".join(h + eol for h in headers) + eol + content + eol
        return data + b"--" + boundary + b"--" + epilogue

    instance = b"\0" * 128 + b"DICM\x02\x00\r\n--\n\r\x00--BOUNDARY\xff" + bytes(range(256))
    dicom = [b"Content-Type: application/dicom"]
    put(out, "multipart", "stow_two_instances", b"\x00" + b'multipart/related; type="application/dicom"; '
        b"boundary=BOUNDARY\n" + body(b"BOUNDARY", [(dicom, instance), (dicom, instance[::-1])]))
    put(out, "multipart", "stow_untyped_json_part", b"\x00" + b"Multipart/Related; boundary=\"a b:c\"\n" +
        body(b"a b:c", [(dicom + [b"Content-Length: 3"], b"abc"),
                        ([b"Content-Type: application/dicom+json"], b'[{"00080018": {"vr": "UI"}}]')]))
    put(out, "multipart", "stow_base64", b"\x00" + b"multipart/related; type=application/dicom; boundary=x\n" +
        body(b"x", [(dicom + [b"Content-Transfer-Encoding: base64"], b"RElDTQ==")]))
    put(out, "multipart", "padding_preamble_epilogue", b"\x01" + b"sep\n" +
        b"preamble --sep\r\n--sep \t\r\nX: 1\r\n folded\r\n\r\none\r\n--sepx\r\n--sep\r\n\r\n\r\n--sep\r\n"
        b"--sep--  \r\nepilogue\r\n--sep\r\n")
    put(out, "multipart", "bare_line_feeds", b"\x01" + b"b\n" +
        body(b"b", [([b"A: b"], b"line\r\n"), ([], b"")], eol=b"\n"))
    put(out, "multipart", "content_type", b"\x02" + b' text/plain ;charset = utf-8;; q="a \\"b\\\\ c;d=e" ; e=""')


if __name__ == "__main__":
    main(sys.argv[1])
