"""The findings SR and heatmap Secondary Capture that structured_report_tool writes (serve/structured_report.h,
serve/secondary_capture.h), read back with pydicom and checked against the CR / DX image they derive from: SOP class,
patient and study attributes copied, a new series with the given UIDs, the image referenced in the content tree and
in the Current Requested Procedure Evidence Sequence, one NUM per label in order (code meaning, code value, decimal
string and float64, UCUM unit), algorithm name and version, the not-a-diagnosis text, UNVERIFIED, SpecificCharacterSet
ISO_IR 192 exactly where needed; then dciodvfy (any "Error" line or a non-zero exit fails; warnings are allowed).
Refusals: one line "error: ...", exit 1, nothing written. Exit 77 (ctest SKIP) where dciodvfy is missing."""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pydicom
from PIL import Image
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

TOOL = os.environ["STRUCTURED_REPORT_TOOL"]
COMPREHENSIVE_SR = "1.2.840.10008.5.1.4.1.1.88.33"
SECONDARY_CAPTURE = "1.2.840.10008.5.1.4.1.1.7"
CR = "1.2.840.10008.5.1.4.1.1.1"
DX = "1.2.840.10008.5.1.4.1.1.1.1"
COPIED = ["PatientName", "PatientID", "PatientBirthDate", "PatientSex", "StudyDate", "StudyTime", "StudyID",
          "AccessionNumber", "ReferringPhysicianName"]
CHESTXRAY14 = ["Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia",
               "Pneumothorax", "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia"]
PROBABILITIES = [0.0, 1.0, 1e-20, 0.123456789012345678, 0.9999999999999999, 0.5, 1.0 / 3.0, 2.0 / 3.0,
                 1.2345678901234567e-5, 0.000123456789012345, 0.25, 0.7310585786300049, 4.9406564584124654e-324,
                 0.1]

failures = []
checked = 0


def check(ok, what, detail=""):
    global checked
    checked += 1
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def write_image(path, sop_class, modality, charset=None, **attributes):
    """A small MONOCHROME2 image with patient and study attributes (text given as str, encoded per `charset`)."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(path, {}, file_meta=meta, preamble=b"\0" * 128)
    ds.is_little_endian, ds.is_implicit_VR = True, False
    if charset:
        ds.SpecificCharacterSet = charset
    ds.SOPClassUID, ds.SOPInstanceUID = sop_class, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID, ds.SeriesInstanceUID = generate_uid(), generate_uid()
    ds.Modality = modality
    defaults = dict(PatientName="Doe^Jane", PatientID="PID-0042", PatientBirthDate="19700102", PatientSex="F",
                    StudyDate="20240305", StudyTime="101112", StudyID="S17", AccessionNumber="ACC123",
                    ReferringPhysicianName="Who^Doctor")
    defaults.update(attributes)
    for key, value in defaults.items():
        if value is not None:
            setattr(ds, key, value)
    ds.Rows, ds.Columns, ds.SamplesPerPixel, ds.PhotometricInterpretation = 8, 8, 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = np.arange(64, dtype=np.uint8).tobytes()
    ds.save_as(path, write_like_original=False)
    return pydicom.dcmread(path)


def run_tool(work, image, findings, out, *extra):
    findings_file = os.path.join(work, "findings.json")
    with open(findings_file, "w", encoding="utf-8") as f:
        json.dump(findings, f, ensure_ascii=False)
    return subprocess.run([TOOL, "--image", image, "--findings", findings_file, "--out", out, *extra],
                          capture_output=True, text=True)


def dciodvfy(path, what):
    result = subprocess.run(["dciodvfy", path], capture_output=True, text=True)
    lines = (result.stdout + result.stderr).splitlines()
    errors = [line for line in lines if line.startswith("Error")]
    warnings = [line for line in lines if line.startswith("Warning")]
    check(result.returncode == 0 and not errors, f"{what}: dciodvfy finds no error",
          f"exit {result.returncode}; " + " | ".join(errors[:5]))
    if warnings:
        print("      dciodvfy warnings (allowed): " + " | ".join(warnings[:8]))


def content_items(item, depth=0):
    """(depth, item) of every content item below `item`, depth first, in order."""
    for child in item.get("ContentSequence", []):
        yield depth, child
        yield from content_items(child, depth + 1)


def code(item, sequence="ConceptNameCodeSequence"):
    entry = item[sequence][0]
    return (entry.CodeValue, entry.CodingSchemeDesignator, entry.CodeMeaning)


def cut_to_64_bytes(label):
    """The longest prefix of `label` whose UTF-8 has at most 64 bytes (LO's limit as dciodvfy counts it)."""
    while len(label.encode("utf-8")) > 64:
        label = label[:-1]
    return label


def decimal_string_ok(text, value):
    """True when `text` (a DS) is at most 16 characters and equals `value` to the digits it prints."""
    if len(text) > 16 or not re.fullmatch(r"[-+]?[0-9.]+([eE][-+]?[0-9]+)?", text):
        return False
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    half_unit = 0.5 * 10.0 ** (int(exponent or 0) - decimals)
    return abs(float(text) - value) <= half_unit * (1 + 1e-9) and (
        value == 0 or abs(float(text) - value) <= 1e-10 * abs(value) or value < 1e-300)


def check_sr(path, image_path, findings, uids, algorithm, needs_utf8, what):
    image = pydicom.dcmread(image_path)
    sr = pydicom.dcmread(path)
    check(sr.file_meta.TransferSyntaxUID == ExplicitVRLittleEndian, f"{what}: explicit VR little endian")
    check(sr.SOPClassUID == COMPREHENSIVE_SR and sr.file_meta.MediaStorageSOPClassUID == COMPREHENSIVE_SR,
          f"{what}: Comprehensive SR", sr.SOPClassUID)
    check(sr.SOPInstanceUID == uids["sop_instance_uid"] == sr.file_meta.MediaStorageSOPInstanceUID,
          f"{what}: the given SOP Instance UID", f"{sr.SOPInstanceUID} vs {uids['sop_instance_uid']}")
    check(sr.SeriesInstanceUID == uids["series_instance_uid"] and sr.SeriesInstanceUID != image.SeriesInstanceUID,
          f"{what}: a new series with the given Series Instance UID", sr.SeriesInstanceUID)
    check(sr.StudyInstanceUID == image.StudyInstanceUID, f"{what}: the image's study")
    check(sr.Modality == "SR", f"{what}: Modality SR")
    for key in COPIED:
        expected = str(image.get(key, "") or "")
        check(str(sr.get(key, "") or "") == expected, f"{what}: {key} copied", f"{sr.get(key)!r} vs {expected!r}")
    check(sr.Manufacturer == "vitpipe" and sr.SeriesDescription, f"{what}: Manufacturer and SeriesDescription")
    check(sr.VerificationFlag == "UNVERIFIED", f"{what}: VerificationFlag UNVERIFIED", sr.VerificationFlag)
    check(sr.CompletionFlag in ("PARTIAL", "COMPLETE"), f"{what}: CompletionFlag", sr.CompletionFlag)
    charset = sr.get("SpecificCharacterSet")
    check((charset == "ISO_IR 192") == needs_utf8 and (needs_utf8 or charset is None),
          f"{what}: SpecificCharacterSet ISO_IR 192 exactly where needed", f"{charset!r}, needed: {needs_utf8}")

    evidence = sr.CurrentRequestedProcedureEvidenceSequence
    references = [(study.StudyInstanceUID, series.SeriesInstanceUID, sop.ReferencedSOPClassUID,
                   sop.ReferencedSOPInstanceUID)
                  for study in evidence for series in study.ReferencedSeriesSequence
                  for sop in series.ReferencedSOPSequence]
    check(references == [(image.StudyInstanceUID, image.SeriesInstanceUID, image.SOPClassUID, image.SOPInstanceUID)],
          f"{what}: the image in CurrentRequestedProcedureEvidenceSequence", str(references))

    check(sr.ValueType == "CONTAINER" and code(sr)[:2] == ("18748-4", "LN"), f"{what}: root CONTAINER title",
          str(code(sr)))
    items = [item for _, item in content_items(sr)]
    images = [item for item in items if item.ValueType == "IMAGE"]
    check(len(images) == 1 and images[0].ReferencedSOPSequence[0].ReferencedSOPClassUID == image.SOPClassUID
          and images[0].ReferencedSOPSequence[0].ReferencedSOPInstanceUID == image.SOPInstanceUID,
          f"{what}: an IMAGE content item referencing the image")
    texts = {code(item)[:2]: item.TextValue for item in items if item.ValueType == "TEXT"}
    check(texts.get(("111001", "DCM")) == algorithm[0], f"{what}: Algorithm Name under DCM 111001",
          texts.get(("111001", "DCM")))
    check(texts.get(("111003", "DCM")) == algorithm[1], f"{what}: Algorithm Version under DCM 111003",
          texts.get(("111003", "DCM")))
    check(any("not a diagnosis" in text for text in texts.values()), f"{what}: the not-a-diagnosis statement")

    numbers = [item for item in items if item.ValueType == "NUM"]
    check(len(numbers) == len(findings), f"{what}: one NUM per label", f"{len(numbers)} vs {len(findings)}")
    code_values = set()
    for item, (label, probability) in zip(numbers, findings):
        value, scheme, meaning = code(item)
        check(meaning == cut_to_64_bytes(label), f"{what}: NUM code meaning is the label (cut to 64 bytes): "
              f"{label[:20]}", meaning)
        check(len(value) <= 16 and value not in code_values and scheme == "99VITPIPE",
              f"{what}: code value {value} of {label[:20]}: <= 16 characters, distinct, 99VITPIPE")
        code_values.add(value)
        measured = item.MeasuredValueSequence[0]
        text = measured["NumericValue"].value
        text = getattr(text, "original_string", None) or str(text)
        check(decimal_string_ok(text, probability), f"{what}: NumericValue of {label[:20]} is {probability!r}",
              text)
        check(float(measured.FloatingPointValue) == probability,
              f"{what}: FloatingPointValue of {label[:20]} is exactly {probability!r}",
              repr(measured.get("FloatingPointValue")))
        unit = code(measured, "MeasurementUnitsCodeSequence")
        check(unit[:2] == ("1", "UCUM"), f"{what}: unit UCUM 1", str(unit))
    dciodvfy(path, what)
    if shutil.which("dsrdump"):  # DCMTK reads its own document back
        result = subprocess.run(["dsrdump", path], capture_output=True, text=True)
        problems = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith(("E:", "F:"))]
        check(result.returncode == 0 and not problems, f"{what}: dsrdump reads it back", " | ".join(problems[:3]))


def make_case(work, image_kind, findings, needs_utf8, charset=None, given_uids=True, **attributes):
    image_path = os.path.join(work, f"{image_kind}.dcm")
    write_image(image_path, CR if image_kind.startswith("cr") else DX, "CR" if image_kind.startswith("cr") else "DX",
                charset=charset, **attributes)
    out = os.path.join(work, f"{image_kind}-sr.dcm")
    algorithm = ("chestxray14-vit", "vitpipe 0.1.0")
    extra = ["--algorithm-name", algorithm[0], "--algorithm-version", algorithm[1]]
    if given_uids:
        extra += ["--sop-uid", generate_uid(), "--series-uid", generate_uid()]
    result = run_tool(work, image_path, findings, out, *extra)
    check(result.returncode == 0, f"{image_kind}: the tool writes the SR", result.stderr.strip())
    if result.returncode != 0:
        return
    uids = json.loads(result.stdout)
    if given_uids:
        check(uids["sop_instance_uid"] == extra[extra.index("--sop-uid") + 1], f"{image_kind}: given UIDs used")
    else:
        check(uids["sop_instance_uid"] != uids["series_instance_uid"], f"{image_kind}: new_dicom_uid is fresh")
    check_sr(out, image_path, findings, uids, algorithm, needs_utf8, image_kind)


def case_cr_ascii(work):
    make_case(work, "cr", list(zip(CHESTXRAY14, PROBABILITIES)), needs_utf8=False)


def case_dx_non_ascii(work):
    findings = [["Épanchement", 0.8125], ["Pneumothorax", 0.03125], ["Kardiomegalie (Herzvergrößerung)", 0.5]]
    # A non-ASCII label alone makes it UTF-8.
    make_case(work, "dx-label", findings, needs_utf8=True)
    # A UTF-8 patient name (and a new_dicom_uid UID pair) with ASCII labels.
    make_case(work, "dx-name-utf8", [["Effusion", 0.25]], needs_utf8=True, charset="ISO_IR 192",
              given_uids=False, PatientName="Müller^Jürgen", ReferringPhysicianName="Ångström^Anders")
    # A Latin-1 patient name is converted to UTF-8.
    make_case(work, "dx-name-latin1", [["Effusion", 0.25]], needs_utf8=True, charset="ISO_IR 100",
              PatientName="Gonçalves^José")
    # ASCII throughout, and attributes absent from the image stay empty (type 2).
    make_case(work, "cr-minimal", [["Effusion", 0.75]], needs_utf8=False, PatientBirthDate=None, PatientSex=None,
              StudyID=None, AccessionNumber=None, ReferringPhysicianName=None)


def case_long_labels(work):
    findings = [["A" * 63 + "-first", 0.1], ["A" * 63 + "-second", 0.2], ["é" * 70, 0.3], ["x" + "é" * 70, 0.35],
                ["x" * 64, 0.4]]
    make_case(work, "cr-long", findings, needs_utf8=True)


def case_heatmap(work):
    rng = np.random.default_rng(7)
    overlay = rng.integers(0, 256, size=(37, 51, 3), dtype=np.uint8)  # odd sizes: an odd pixel byte count
    png = os.path.join(work, "overlay.png")
    Image.fromarray(overlay, "RGB").save(png)
    # A chest (unpaired: no Laterality), a body part the image does not name (Laterality empty: unknown), and a
    # paired one with the image's laterality.
    for what, attributes, laterality in [("chest", dict(BodyPartExamined="CHEST"), None), ("unnamed", {}, ""),
                                         ("paired", dict(BodyPartExamined="HAND", ImageLaterality="L"), "L")]:
        heatmap(work, f"heatmap {what}", overlay, png, attributes, laterality)


def heatmap(work, what, overlay, png, attributes, laterality):
    image_path = os.path.join(work, "dx.dcm")
    image = write_image(image_path, DX, "DX", charset="ISO_IR 192", PatientName="Łukasz^Zieliński", **attributes)
    sc_path = os.path.join(work, "sc.dcm")
    sc_uid, sc_series = generate_uid(), generate_uid()
    result = run_tool(work, image_path, [["Effusion", 0.5]], os.path.join(work, "sr.dcm"), "--heatmap-png", png,
                      "--heatmap-out", sc_path, "--heatmap-description", "Effusion 0.50 (Grad-CAM) é",
                      "--heatmap-sop-uid", sc_uid, "--heatmap-series-uid", sc_series)
    check(result.returncode == 0, f"{what}: the tool writes the SC", result.stderr.strip())
    if result.returncode != 0:
        return
    sc = pydicom.dcmread(sc_path)
    check(sc.SOPClassUID == SECONDARY_CAPTURE == sc.file_meta.MediaStorageSOPClassUID, f"{what}: Secondary Capture")
    check(sc.SOPInstanceUID == sc_uid == sc.file_meta.MediaStorageSOPInstanceUID, f"{what}: the given SOP UID")
    check(sc.SeriesInstanceUID == sc_series != image.SeriesInstanceUID, f"{what}: a new series, the given UID")
    check(sc.StudyInstanceUID == image.StudyInstanceUID, f"{what}: the image's study")
    for key in COPIED:
        check(str(sc.get(key, "")) == str(image.get(key, "")), f"{what}: {key} copied", repr(sc.get(key)))
    check(sc.get("SpecificCharacterSet") == "ISO_IR 192", f"{what}: ISO_IR 192")
    check(sc.ConversionType == "WSD" and sc.BurnedInAnnotation == "YES", f"{what}: WSD, burned-in annotation")
    check(sc.SamplesPerPixel == 3 and sc.PhotometricInterpretation == "RGB" and sc.BitsAllocated == 8
          and sc.BitsStored == 8 and sc.PlanarConfiguration == 0, f"{what}: 8-bit RGB, interleaved")
    check(sc.SeriesDescription == "Effusion 0.50 (Grad-CAM) é", f"{what}: description", sc.SeriesDescription)
    check(sc.get("BodyPartExamined") == attributes.get("BodyPartExamined"), f"{what}: BodyPartExamined copied")
    check(sc.get("Laterality") == laterality, f"{what}: Laterality {laterality!r}", repr(sc.get("Laterality")))
    source = sc.SourceImageSequence[0]
    check(source.ReferencedSOPInstanceUID == image.SOPInstanceUID and source.ReferencedSOPClassUID == DX,
          f"{what}: the image in SourceImageSequence")
    check((sc.Rows, sc.Columns) == overlay.shape[:2] and np.array_equal(sc.pixel_array, overlay),
          f"{what}: pixels are the overlay's")
    dciodvfy(sc_path, what)


def expect_refusal(work, what, image, findings, expected, *extra):
    out = os.path.join(work, "refused.dcm")
    result = run_tool(work, image, findings, out, *extra)
    lines = result.stderr.strip().splitlines()
    check(result.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0],
          f"refusal: {what}: one line naming {expected!r}, exit 1", f"exit {result.returncode}: {result.stderr!r}")
    check(not os.path.exists(out) and not any(".tmp-" in name for name in os.listdir(work)),
          f"refusal: {what}: nothing written")


def case_refusals(work):
    image = os.path.join(work, "cr.dcm")
    dataset = write_image(image, CR, "CR")
    good = [["Effusion", 0.5]]
    not_dicom = os.path.join(work, "not-dicom.dcm")
    with open(not_dicom, "w") as f:
        f.write("this is not a DICOM file\n" * 20)
    expect_refusal(work, "not a DICOM file", not_dicom, good, "not-dicom.dcm")
    expect_refusal(work, "a missing image", os.path.join(work, "absent.dcm"), good, "absent.dcm")
    no_study = os.path.join(work, "no-study.dcm")
    without = pydicom.dcmread(image)
    del without.StudyInstanceUID
    without.save_as(no_study)
    expect_refusal(work, "no StudyInstanceUID", no_study, good, "StudyInstanceUID")
    expect_refusal(work, "a probability above 1", image, [["Effusion", 1.5]], "Effusion")
    expect_refusal(work, "a label with a backslash", image, [["Eff\\usion", 0.5]], "backslash")
    expect_refusal(work, "a repeated label", image, [["Effusion", 0.5], ["Effusion", 0.25]], "twice")
    expect_refusal(work, "no findings", image, [], "no findings")
    expect_refusal(work, "the image's own series", image, good, "new series", "--series-uid",
                   dataset.SeriesInstanceUID)
    expect_refusal(work, "an invalid UID", image, good, "not a valid DICOM UID", "--sop-uid", "1.2.abc")


CASES = {"cr-ascii": case_cr_ascii, "dx-non-ascii": case_dx_non_ascii, "long-labels": case_long_labels,
         "heatmap": case_heatmap, "refusals": case_refusals}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=sorted(CASES), required=True)
    args = parser.parse_args()
    if shutil.which("dciodvfy") is None and args.case != "refusals":
        print("SKIP: dciodvfy (dicom3tools) is not installed; the SR cannot be validated")
        return 77
    with tempfile.TemporaryDirectory() as work:
        CASES[args.case](work)
    print(f"{checked} checks, {len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
