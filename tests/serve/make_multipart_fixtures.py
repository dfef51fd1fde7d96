"""Multipart/related messages as Python's email package writes them (MIMEMultipart, BytesGenerator), and the part
bodies Python's own parser reads back from them: test_multipart_reader.cpp checks that vitpipe's reader reads the
same bytes. Deterministic; usage `/usr/bin/python3 make_multipart_fixtures.py` (writes fixtures/ beside it)."""

import email.policy
import io
import os
import random
from email.encoders import encode_noop
from email.generator import BytesGenerator
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.parser import BytesParser

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def dicom_like(rng, size):
    """A DICOM file's shape (128 NULs, "DICM") and random bytes: NULs, CRs, LFs, "--" among them."""
    return b"\0" * 128 + b"DICM" + bytes(rng.randrange(256) for _ in range(size)) + b"\r\n--\r\n"


def write(name, message, policy):
    out = io.BytesIO()
    BytesGenerator(out, policy=policy).flatten(message)
    data = out.getvalue()
    parsed = BytesParser(policy=policy).parsebytes(data)
    parts = [part.get_payload(decode=True) for part in parsed.get_payload()]
    with open(os.path.join(OUT, name + ".mime"), "wb") as f:
        f.write(data)
    for index, payload in enumerate(parts):
        with open(os.path.join(OUT, f"{name}.part{index}"), "wb") as f:
            f.write(payload)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(7)
    # HTTP policy (CRLF, no folding), two binary instances.
    message = MIMEMultipart("related", type="application/dicom", boundary="vitpipe-fixture-boundary-1")
    for size in (300, 41):
        message.attach(MIMEApplication(dicom_like(rng, size), "dicom", _encoder=encode_noop))
    write("python_email_http", message, email.policy.HTTP)
    # A preamble and an epilogue, a boundary with quotes' worth of characters, three parts.
    message = MIMEMultipart("related", type="application/dicom", boundary="'()+_,-./:=? x")
    message.preamble = "This is a multi-part message in MIME format."
    message.epilogue = "the end"
    for size in (10, 0, 200):
        message.attach(MIMEApplication(dicom_like(rng, size), "dicom", _encoder=encode_noop))
    write("python_email_preamble_epilogue", message, email.policy.HTTP)
    # The default policy of Python's email package (compat32): LF line ends throughout; its own boundary.
    message = MIMEMultipart("related", type="application/dicom")
    message.set_boundary("===============0123456789012345678==")
    message.attach(MIMEApplication(b"\0\0DICM" + bytes(range(256)), "dicom", _encoder=encode_noop))
    write("python_email_lf", message, email.policy.compat32)


if __name__ == "__main__":
    main()
