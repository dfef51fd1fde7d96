"""Small synthetic DICOM files written by pydicom, for the DICOM tests and the fuzzers' seeds: a Digital X-Ray image
(gray, MONOCHROME1/2, or RGB interleaved / planar; one frame or several) in any transfer syntax pydicom writes, or
with pixel bytes the caller encapsulated (a compressed syntax pydicom cannot encode, or a crafted fragment)."""

import io

import numpy as np
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import (DeflatedExplicitVRLittleEndian, ExplicitVRBigEndian, ExplicitVRLittleEndian,
                         ImplicitVRLittleEndian, RLELossless, generate_uid)

NATIVE_SYNTAXES = (ExplicitVRLittleEndian, ImplicitVRLittleEndian, ExplicitVRBigEndian, DeflatedExplicitVRLittleEndian)


def dicom_file_bytes(words, bits_allocated, bits_stored, high_bit=None, signed=False, photometric="MONOCHROME2",
                     planar=0, frames=None, syntax=ExplicitVRLittleEndian, pixel_bytes=None, instance_uid=None,
                     **attributes):
    """words: [rows, cols] (gray), [rows, cols, 3] (RGB, interleaved) or [frames, rows, cols]. pixel_bytes, when
    given, replaces the words' bytes (encapsulated ones for a compressed syntax); RLE without them is pydicom's own
    encoder. instance_uid: a fixed SOP Instance UID (byte-identical files), else a fresh one."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.1.1"  # Digital X-Ray Image Storage - For Presentation
    meta.MediaStorageSOPInstanceUID = instance_uid or generate_uid()
    encapsulated = syntax not in NATIVE_SYNTAXES
    encode_rle = syntax == RLELossless and pixel_bytes is None  # pydicom's encoder, from the native words
    meta.TransferSyntaxUID = ExplicitVRLittleEndian if encode_rle else syntax
    ds = FileDataset("synthetic.dcm", {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.Modality = "DX"
    ds.PatientID = "synthetic"
    rgb = photometric == "RGB"
    shape = words.shape[1:] if frames else words.shape
    ds.Rows, ds.Columns = int(shape[0]), int(shape[1])
    ds.SamplesPerPixel = 3 if rgb else 1
    ds.PhotometricInterpretation = photometric
    if rgb:
        ds.PlanarConfiguration = planar
    if frames:
        ds.NumberOfFrames = frames
    ds.BitsAllocated = bits_allocated
    ds.BitsStored = bits_stored
    ds.HighBit = bits_stored - 1 if high_bit is None else high_bit
    ds.PixelRepresentation = 1 if signed else 0
    for key, value in attributes.items():
        setattr(ds, key, value)
    ds.is_little_endian = syntax != ExplicitVRBigEndian or encapsulated
    ds.is_implicit_VR = syntax == ImplicitVRLittleEndian
    if pixel_bytes is None:
        data = np.ascontiguousarray(words.transpose(2, 0, 1)) if rgb and planar == 1 else words
        word = np.dtype("u2" if ds.BitsAllocated == 16 else "u1").newbyteorder("<" if ds.is_little_endian else ">")
        pixel_bytes = data.astype(word).tobytes()
    ds.PixelData = pixel_bytes
    if encode_rle:
        ds.compress(RLELossless)
    elif encapsulated:
        ds["PixelData"].is_undefined_length = True
        ds["PixelData"].VR = "OB"
    buffer = io.BytesIO()
    ds.save_as(buffer, write_like_original=False)
    return buffer.getvalue()


def write_dicom(path, words, bits_allocated, bits_stored, **options):
    """dicom_file_bytes written to path; returns path."""
    with open(path, "wb") as f:
        f.write(dicom_file_bytes(words, bits_allocated, bits_stored, **options))
    return path
