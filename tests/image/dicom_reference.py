"""The DICOM pixel rule of src/data/dicom_pixels.h, written a second time, in numpy, from the rule's text (not from
vitpipe's code): stored value -> modality value -> VOI (window, VOI LUT or min..max) or the --intensity policy ->
level = floor(y + 0.5) -> MONOCHROME1 inverted. pydicom reads the attributes; the pixel words come from the files the
tests generate (little-endian, uncompressed) or from an independent decoder of a lossy file."""

import numpy as np


def stored_values(words, bits_stored, high_bit, signed):
    """Bits Allocated words (any unsigned int array) -> stored values (int64)."""
    shift = high_bit + 1 - bits_stored
    values = (words.astype(np.int64) >> shift) & ((1 << bits_stored) - 1)
    if signed:
        values = np.where(values >= (1 << (bits_stored - 1)), values - (1 << bits_stored), values)
    return values


def lut_value(data, first, x):
    """LUT rule: the entry clamp(floor(x) - first, 0, n - 1)."""
    data = np.asarray(data, dtype=np.float64)
    index = np.clip(np.floor(x) - first, 0, len(data) - 1).astype(np.int64)
    return data[index]


def descriptor(item, signed_pixels):
    """(entries, first input, bits) of a LUT Descriptor; the first input is signed for SS or signed pixels."""
    values = [int(v) for v in item.LUTDescriptor]
    entries = 65536 if values[0] == 0 else values[0]
    first = values[1]
    vr = item["LUTDescriptor"].VR
    if (vr == "SS" or (vr != "US" and signed_pixels)) and first >= 32768:
        first -= 65536
    return entries, first, values[2]


def lut_data(item):
    data = item.LUTData
    if isinstance(data, bytes):
        data = np.frombuffer(data, dtype="<u2")
    return np.asarray(data, dtype=np.float64)


def modality_values(sv, ds):
    signed = int(ds.PixelRepresentation) == 1
    if "ModalityLUTSequence" in ds:
        item = ds.ModalityLUTSequence[0]
        _, first, _ = descriptor(item, signed)
        return lut_value(lut_data(item), first, sv.astype(np.float64))
    slope = float(ds.get("RescaleSlope", 1.0))
    intercept = float(ds.get("RescaleIntercept", 0.0))
    return sv.astype(np.float64) * slope + intercept


def linear(x, c, w):
    with np.errstate(divide="ignore", invalid="ignore"):
        y = ((x - (c - 0.5)) / (w - 1) + 0.5) * 255
    return np.where(x <= c - 0.5 - (w - 1) / 2, 0.0, np.where(x > c - 0.5 + (w - 1) / 2, 255.0, y))


def linear_exact(x, c, w):
    y = (x - c) / w * 255 + 127.5
    return np.where(x <= c - w / 2, 0.0, np.where(x > c + w / 2, 255.0, y))


def sigmoid(x, c, w):
    return 255 / (1 + np.exp(-4 * (x - c) / w))


def window_list(ds):
    if "WindowCenter" not in ds:
        return []
    centres = ds.WindowCenter
    widths = ds.WindowWidth
    centres = list(centres) if hasattr(centres, "__len__") and not isinstance(centres, str) else [centres]
    widths = list(widths) if hasattr(widths, "__len__") and not isinstance(widths, str) else [widths]
    return [(float(c), float(w)) for c, w in zip(centres, widths)]


def levels(y):
    return np.clip(np.floor(y + 0.5), 0, 255).astype(np.uint8)


def y_of(words, ds, intensity="auto", dicom_window="first"):
    """The real-valued y in [0, 255] of each pixel, before rounding and inversion."""
    bits_stored, high_bit = int(ds.BitsStored), int(ds.HighBit)
    signed = int(ds.PixelRepresentation) == 1
    sv = stored_values(words, bits_stored, high_bit, signed)
    mv = modality_values(sv, ds)
    if intensity == "full-range":
        smallest = -(1 << (bits_stored - 1)) if signed else 0
        return (sv - smallest).astype(np.float64) * 255.0 / (2.0 ** bits_stored - 1.0)
    if intensity.startswith("window:"):
        c, w = (float(v) for v in intensity[len("window:"):].split(","))
        return linear(mv, c, w)
    if intensity.startswith("percentile:"):
        lo, hi = (float(v) for v in intensity[len("percentile:"):].split(","))
        low, high = np.percentile(mv.ravel(), [lo, hi])
        with np.errstate(divide="ignore", invalid="ignore"):
            y = (mv - low) / (high - low) * 255.0
        return np.where(mv <= low, 0.0, np.where(mv >= high, 255.0, y))
    assert intensity == "auto", intensity
    windows = window_list(ds)
    luts = list(ds.VOILUTSequence) if "VOILUTSequence" in ds else []
    if dicom_window == "minmax" or (dicom_window == "first" and not windows and not luts):
        low, high = mv.min(), mv.max()
        return linear(mv, (low + high + 1) / 2, high - low + 1)
    index = 0 if dicom_window == "first" else int(dicom_window) - 1
    if index < len(windows):
        c, w = windows[index]
        function = str(ds.get("VOILUTFunction", "LINEAR")).strip() or "LINEAR"
        return {"LINEAR": linear, "LINEAR_EXACT": linear_exact, "SIGMOID": sigmoid}[function](mv, c, w)
    item = luts[index - len(windows)]
    _, first, bits = descriptor(item, signed)
    return lut_value(lut_data(item), first, mv) * 255.0 / (2.0 ** bits - 1.0)


def reference_image(words, ds, intensity="auto", dicom_window="first"):
    """The 8-bit image vitpipe must produce from a gray DICOM's first-frame words [rows, columns]."""
    out = levels(y_of(words, ds, intensity, dicom_window))
    if str(ds.PhotometricInterpretation).strip() == "MONOCHROME1":
        out = (255 - out.astype(np.int64)).astype(np.uint8)
    return out
