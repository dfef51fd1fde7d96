#!/usr/bin/env python3
"""`vitpipe info --json` names what runs bf16 attention (kernels/attention_tiles.h): AMX tiles at the amx level,
oneDNN's GEMMs elsewhere, the emulated tiles when VITPIPE_ATTENTION_TILES=emulated; a bad value is one error line
and exit 1."""
import json
import os
import subprocess
import sys

vitpipe = os.environ["VITPIPE"]


def info(tiles=None):
    env = dict(os.environ)
    env.pop("VITPIPE_ATTENTION_TILES", None)
    if tiles is not None:
        env["VITPIPE_ATTENTION_TILES"] = tiles
    return subprocess.run([vitpipe, "info", "--json"], env=env, capture_output=True, text=True)


plain = json.loads(info().stdout)
expected = "amx-tiles" if plain["cpu_kernels"] == "amx" else "onednn"
failures = []
if plain["bf16_attention"] != expected:
    failures.append(f"kernels {plain['cpu_kernels']}: bf16_attention {plain['bf16_attention']!r}, expected {expected!r}")
if plain["cpu_kernels"] == "amx" and not plain["amx_tile_state_granted"]:
    failures.append("the amx level was chosen without Linux granting the tile state")
for value, name in (("emulated", "emulated-tiles"), ("off", "onednn"), ("no-products", "tiles-without-products")):
    got = json.loads(info(value).stdout)["bf16_attention"]
    if got != name:
        failures.append(f"VITPIPE_ATTENTION_TILES={value}: {got!r}, expected {name!r}")
bad = info("fast")
lines = bad.stderr.strip().splitlines()
if bad.returncode != 1 or len(lines) != 1 or "VITPIPE_ATTENTION_TILES" not in lines[0] or "fast" not in lines[0]:
    failures.append(f"VITPIPE_ATTENTION_TILES=fast: exit {bad.returncode}, stderr {bad.stderr!r}")
if failures:
    sys.exit("FAIL: " + "\nFAIL: ".join(failures))
print(f"ok: kernels {plain['cpu_kernels']}, bf16 attention {plain['bf16_attention']}; the override and a bad value")
