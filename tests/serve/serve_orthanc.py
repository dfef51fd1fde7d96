"""`vitpipe serve` as a DICOM node of a real PACS: Debian's Orthanc, started here on loopback with a generated
configuration that lists vitpipe as a modality and as a DICOMweb server.

    serve_orthanc.py --case store-sr|stow|refused|resume

store-sr  Orthanc sends a study (CR and DX) to vitpipe by C-STORE (POST /modalities/vitpipe/store); vitpipe sends a
          Comprehensive SR (and, with --send-heatmaps, the overlay as Secondary Capture) back into the same study.
          The SR is read from Orthanc's copy with pydicom: its probabilities equal `vitpipe predict` on the same file,
          the patient and study are the image's; dciodvfy accepts it (no Error lines). DCMTK's echoscu reaches the node.
stow      Orthanc's DICOMweb client sends the study to vitpipe's STOW-RS route (/dicom-web/servers/vitpipe/stow),
          which checks the answer lists every instance.
refused   A PACS that refuses the SR (Orthanc checks the called AE title; vitpipe calls another): the SR ends in the
          spool's dead-letter/ with the reason, and the node keeps serving.
resume    The PACS is down when the results are made: they wait in the outbox, and a vitpipe started again later
          sends them to the PACS once it is up (the SR keeps its instance UID).

Skipped (exit 77) where Orthanc or its DICOMweb plugin is not installed. Bounded: at most a minute per wait.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pydicom

from serve_common import Server, free_port, make_model, predict_lines, run_case

ORTHANC = shutil.which("Orthanc") or "/usr/sbin/Orthanc"
DICOMWEB_PLUGIN = "/usr/share/orthanc/plugins/libOrthancDicomWeb.so"


# Who the node lets associate in these tests: the PACS, and DCMTK's tools standing in for modalities.
CALLERS = "ORTHANC@127.0.0.1,STORESCU@127.0.0.1,ECHOSCU@127.0.0.1"


class Orthanc:
    def __init__(self, root, vitpipe_dicom_port=None, vitpipe_http_port=None, dicom_port=None):
        self.http_port = free_port()
        self.dicom_port = dicom_port or free_port()
        self.root = os.path.join(root, "orthanc")
        os.makedirs(self.root, exist_ok=True)
        config = {
            "Name": "vitpipe-test", "HttpPort": self.http_port, "DicomPort": self.dicom_port, "DicomAet": "ORTHANC",
            "StorageDirectory": os.path.join(self.root, "storage"), "IndexDirectory": os.path.join(self.root, "index"),
            "RemoteAccessAllowed": False, "AuthenticationEnabled": False, "HttpServerEnabled": True,
            "DicomCheckCalledAet": True, "DicomAlwaysAllowStore": True, "DicomAlwaysAllowEcho": True,
            "DicomModalities": {}, "Plugins": [DICOMWEB_PLUGIN],
            "DicomWeb": {"Enable": True, "Root": "/dicom-web/", "Servers": {}},
            "StableAge": 1, "HttpTimeout": 60, "DicomScuTimeout": 30,
        }
        if vitpipe_dicom_port:
            config["DicomModalities"]["vitpipe"] = ["VITPIPE", "127.0.0.1", vitpipe_dicom_port]
        if vitpipe_http_port:
            config["DicomWeb"]["Servers"]["vitpipe"] = [f"http://127.0.0.1:{vitpipe_http_port}/dicomweb/"]
        self.config = os.path.join(self.root, "orthanc.json")
        with open(self.config, "w") as f:
            json.dump(config, f)
        self.log = open(os.path.join(self.root, "orthanc.log"), "w")
        self.process = None

    def __enter__(self):
        self.process = subprocess.Popen([ORTHANC, self.config], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("Orthanc exited: " + open(self.log.name).read()[-2000:])
            try:
                self.get("/system")
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("Orthanc did not start in 60 s")

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def call(self, method, path, body=None, content_type="application/json", raw=False):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}", data=data, method=method,
                                     headers={"Content-Type": content_type} if data is not None else {})
        with urllib.request.urlopen(req, timeout=120) as response:
            payload = response.read()
        return payload if raw else json.loads(payload or b"null")

    def get(self, path, raw=False):
        return self.call("GET", path, raw=raw)

    def upload(self, path):
        with open(path, "rb") as f:
            return self.call("POST", "/instances", f.read(), "application/dicom")

    def study_instances(self, study):
        return self.get(f"/studies/{study}/instances")

    def wait_for_instances(self, study, modality, count, seconds=60):
        deadline = time.time() + seconds
        while time.time() < deadline:
            found = [i for i in self.study_instances(study)
                     if self.get(f"/instances/{i['ID']}/tags?simplify").get("Modality") == modality]
            if len(found) >= count:
                return found
            time.sleep(0.3)
        return []


def make_study(root):
    """A CR and a DX image of one patient and study, with the attributes a PACS files by."""
    import numpy as np
    sys.path.insert(0, os.path.join(os.environ.get("VITPIPE_SOURCE_DIR", "."), "tests", "image"))
    from dicom_files import write_dicom
    rng = np.random.default_rng(11)
    common = dict(PatientName="Doe^Jane", PatientID="PAT-0042", PatientBirthDate="19700101", PatientSex="F",
                  StudyInstanceUID="1.2.826.0.1.3680043.8.498.1001", StudyDate="20261203", StudyTime="101500",
                  StudyID="S1", AccessionNumber="ACC42", ReferringPhysicianName="House^Greg")
    cr = write_dicom(os.path.join(root, "cr.dcm"), rng.integers(0, 1024, (96, 80), dtype=np.uint16), 16, 10,
                     SeriesInstanceUID="1.2.826.0.1.3680043.8.498.1001.1", **common)
    dx = write_dicom(os.path.join(root, "dx.dcm"), rng.integers(0, 4096, (72, 88), dtype=np.uint16), 16, 12,
                     SeriesInstanceUID="1.2.826.0.1.3680043.8.498.1001.2", **common)
    ds = pydicom.dcmread(cr)
    ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.1"  # CR Image Storage
    ds.Modality = "CR"
    ds.save_as(cr)
    return [cr, dx]


def sr_text(ds, code_value):
    """The TextValue of the SR's TEXT item whose concept has this code value, wherever it sits."""
    def walk(items):
        for item in items:
            if item.ValueType == "TEXT" and item.ConceptNameCodeSequence[0].CodeValue == code_value:
                return item.TextValue
            if "ContentSequence" in item:
                found = walk(item.ContentSequence)
                if found is not None:
                    return found
        return None

    return walk(ds.ContentSequence)


def sr_probabilities(ds):
    """{label: (NumericValue as text, FloatingPointValue)} from the SR's NUM items, wherever they sit."""
    out = {}

    def walk(items):
        for item in items:
            if item.ValueType == "NUM":
                measured = item.MeasuredValueSequence[0]
                out[item.ConceptNameCodeSequence[0].CodeMeaning] = (str(measured.NumericValue),
                                                                    float(measured.FloatingPointValue))
            if "ContentSequence" in item:
                walk(item.ContentSequence)

    walk(ds.ContentSequence)
    return out


def dciodvfy_errors(path):
    if not shutil.which("dciodvfy"):
        return None
    result = subprocess.run(["dciodvfy", path], capture_output=True, text=True)
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("Error")]
    return result.returncode, errors


def case_store_sr(root, checks):
    model = make_model(root)
    images = make_study(root)
    expected = predict_lines(model, images)
    uids = {pydicom.dcmread(p).SOPInstanceUID: p for p in images}
    with open(os.path.join(model, "model.safetensors"), "rb") as f:  # the model named: its folder and hash
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    algorithm = f"{os.path.basename(os.path.dirname(model))}/model (sha256 {digest})"
    vitpipe_dicom = free_port()
    orthanc_dicom = free_port()
    with Orthanc(root, vitpipe_dicom_port=vitpipe_dicom, dicom_port=orthanc_dicom) as orthanc:
        with Server(model, "--dicom-port", str(vitpipe_dicom), "--spool", os.path.join(root, "spool"),
                    "--send-results-to", f"ORTHANC@127.0.0.1:{orthanc_dicom}", "--send-heatmaps",
                    "--allowed-callers", CALLERS) as server:
            echo = subprocess.run(["echoscu", "-aec", "VITPIPE", "127.0.0.1", str(vitpipe_dicom)], capture_output=True)
            checks.check(echo.returncode == 0, f"echoscu to the node: {echo.returncode}")
            study = None
            for p in images:
                study = orthanc.upload(p)["ParentStudy"]
            job = orthanc.call("POST", "/modalities/vitpipe/store", {"Resources": [study], "Synchronous": True})
            checks.check(isinstance(job, dict), f"Orthanc's C-STORE to vitpipe: {job}")
            srs = orthanc.wait_for_instances(study, "SR", 2)
            scs = orthanc.wait_for_instances(study, "OT", 2)
            checks.check(len(srs) == 2, f"SRs in Orthanc's study: {len(srs)}, expected 2")
            checks.check(len(scs) == 2, f"heatmap Secondary Captures in Orthanc's study: {len(scs)}, expected 2")
            for sr in srs:
                path = os.path.join(root, f"sr-{sr['ID']}.dcm")
                with open(path, "wb") as f:
                    f.write(orthanc.get(f"/instances/{sr['ID']}/file", raw=True))
                ds = pydicom.dcmread(path)
                checks.check(ds.SOPClassUID == "1.2.840.10008.5.1.4.1.1.88.33", f"SR class {ds.SOPClassUID}")
                source_uid = ds.CurrentRequestedProcedureEvidenceSequence[0].ReferencedSeriesSequence[0] \
                    .ReferencedSOPSequence[0].ReferencedSOPInstanceUID
                checks.check(source_uid in uids, f"SR evidence references {source_uid}")
                image = pydicom.dcmread(uids.get(source_uid, images[0]))
                for attribute in ("PatientID", "PatientName", "StudyInstanceUID", "AccessionNumber"):
                    checks.check(getattr(ds, attribute) == getattr(image, attribute),
                                 f"SR {attribute}: {getattr(ds, attribute)} != {getattr(image, attribute)}")
                checks.check(ds.SeriesInstanceUID != image.SeriesInstanceUID, "SR is not a new series")
                checks.check(ds.VerificationFlag == "UNVERIFIED", f"SR verification {ds.VerificationFlag}")
                reference = expected[uids.get(source_uid, images[0])]["probabilities"]
                found = sr_probabilities(ds)
                checks.check(set(found) == set(reference), f"SR labels {sorted(found)}")
                for label, p in reference.items():
                    text, value = found.get(label, ("", float("nan")))
                    checks.check(abs(value - p) <= 1e-6, f"SR {label}: FloatingPointValue {value} vs predict {p}")
                    checks.check(len(text) <= 16 and abs(float(text or "nan") - p) <= 1e-6,
                                 f"SR {label}: NumericValue '{text}' vs predict {p}")
                checks.check(sr_text(ds, "111001") == algorithm, f"SR Algorithm Name '{sr_text(ds, '111001')}', "
                             f"expected the model and its weights' hash '{algorithm}'")
                verdict = dciodvfy_errors(path)
                if verdict is None:
                    print("dciodvfy not installed: the SR's IOD check skipped")
                else:
                    checks.check(verdict[0] == 0 and not verdict[1], f"dciodvfy: exit {verdict[0]}, {verdict[1]}")
            print(f"Orthanc holds {len(srs)} SRs and {len(scs)} heatmaps from vitpipe in the image's study")
            status_after = subprocess.run(["echoscu", "-aec", "VITPIPE", "127.0.0.1", str(vitpipe_dicom)])
            checks.check(status_after.returncode == 0, "the node still answers after the study")
            spool = os.path.join(root, "spool")
            checks.check(not os.listdir(os.path.join(spool, "outbox")) and not os.listdir(os.path.join(spool, "received")),
                         "spool not empty after sending")
        checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


def case_stow(root, checks):
    model = make_model(root)
    images = make_study(root)
    with Server(model) as server:
        with Orthanc(root, vitpipe_http_port=server.port) as orthanc:
            study = None
            for p in images:
                study = orthanc.upload(p)["ParentStudy"]
            # Synchronous: Orthanc's client fails the job unless the answer lists every instance it sent.
            answer = orthanc.call("POST", "/dicom-web/servers/vitpipe/stow", {"Resources": [study], "Synchronous": True})
            checks.check(isinstance(answer, dict), f"Orthanc's STOW-RS to vitpipe: {answer}")
            output = server.output()
            checks.check(output.count("POST /dicomweb/studies 200") >= 1, "vitpipe saw no STOW-RS request")
            print("Orthanc's STOW-RS client accepted vitpipe's answer")
    checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


def case_refused(root, checks):
    model = make_model(root)
    images = make_study(root)
    vitpipe_dicom = free_port()
    orthanc_dicom = free_port()
    spool = os.path.join(root, "spool")
    with Orthanc(root, vitpipe_dicom_port=vitpipe_dicom, dicom_port=orthanc_dicom):
        # Orthanc checks the called AE title and rejects an association that calls another.
        with Server(model, "--dicom-port", str(vitpipe_dicom), "--spool", spool, "--send-results-to",
                    f"NOTORTHANC@127.0.0.1:{orthanc_dicom}", "--allowed-callers", CALLERS) as server:
            store = subprocess.run(["storescu", "-aec", "VITPIPE", "127.0.0.1", str(vitpipe_dicom), images[1]],
                                   capture_output=True, text=True)
            checks.check(store.returncode == 0, f"storescu to the node: {store.returncode} {store.stderr[-300:]}")
            dead = os.path.join(spool, "dead-letter")
            deadline = time.time() + 60

            def kept():  # the server writes the reason first, then moves the SR beside it: wait for both
                names = os.listdir(dead)
                return any(f.endswith(".reason.txt") and f[: -len(".reason.txt")] in names for f in names)

            while time.time() < deadline and not kept():
                time.sleep(0.2)
            reasons = [f for f in os.listdir(dead) if f.endswith(".reason.txt")]
            checks.check(len(reasons) == 1, f"dead-letter: {os.listdir(dead)}")
            if reasons:
                reason = open(os.path.join(dead, reasons[0])).read()
                checks.check("reject" in reason.lower(), f"dead-letter reason: {reason.strip()}")
                checks.check(os.path.exists(os.path.join(dead, reasons[0][: -len(".reason.txt")])),
                             "the refused SR is not kept beside its reason")
                print("dead-letter reason:", reason.strip())
            echo = subprocess.run(["echoscu", "-aec", "VITPIPE", "127.0.0.1", str(vitpipe_dicom)])
            checks.check(echo.returncode == 0, "the node still answers after the refusal")
        checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


def case_resume(root, checks):
    model = make_model(root)
    images = make_study(root)
    vitpipe_dicom = free_port()
    orthanc_dicom = free_port()
    spool = os.path.join(root, "spool")
    options = ("--dicom-port", str(vitpipe_dicom), "--spool", spool, "--send-results-to",
               f"ORTHANC@127.0.0.1:{orthanc_dicom}", "--allowed-callers", CALLERS)
    with Server(model, *options) as server:  # no PACS listening yet: the SR waits in the outbox
        store = subprocess.run(["storescu", "-aec", "VITPIPE", "127.0.0.1", str(vitpipe_dicom), images[0]],
                               capture_output=True, text=True)
        checks.check(store.returncode == 0, f"storescu to the node: {store.returncode}")
        outbox = os.path.join(spool, "outbox")
        deadline = time.time() + 60
        while time.time() < deadline and not os.listdir(outbox):
            time.sleep(0.2)
        waiting = sorted(os.listdir(outbox))
        checks.check(len(waiting) == 1, f"outbox while the PACS is down: {waiting}")
    checks.check(server.exit_code == 0, f"SIGTERM with an unsent SR: exit {server.exit_code}")
    checks.check(sorted(os.listdir(outbox)) == waiting, "the unsent SR did not stay in the outbox")
    with Orthanc(root, vitpipe_dicom_port=vitpipe_dicom, dicom_port=orthanc_dicom) as orthanc:
        with Server(model, *options) as server:
            deadline = time.time() + 60
            while time.time() < deadline and os.listdir(outbox):
                time.sleep(0.2)
            checks.check(not os.listdir(outbox), "the SR was not sent after the restart")
            found = [i for i in orthanc.get("/instances") if
                     orthanc.get(f"/instances/{i}/tags?simplify").get("SOPInstanceUID") == waiting[0][:-4]]
            checks.check(len(found) == 1, f"Orthanc holds the SR with its first UID {waiting[0][:-4]}: {found}")
        checks.check(server.exit_code == 0, f"SIGTERM: exit {server.exit_code}")


CASES = {"store-sr": case_store_sr, "stow": case_stow, "refused": case_refused, "resume": case_resume}


if __name__ == "__main__":
    missing = not os.path.exists(ORTHANC) or not os.path.exists(DICOMWEB_PLUGIN) or not shutil.which("storescu")
    run_case(CASES, "Orthanc, its DICOMweb plugin or DCMTK's tools are not installed (scripts/setup.sh --tests installs "
                    "orthanc, orthanc-dicomweb and dcmtk)" if missing else None)
