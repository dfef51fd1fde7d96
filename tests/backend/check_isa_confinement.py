#!/usr/bin/env python3
"""A static proof that the vitpipe binary executes nothing beyond its baseline (x86-64-v3) outside the dispatched
kernels: every function holding an AVX-512 instruction (EVEX-encoded: an instruction whose first byte is 0x62 in
64-bit code, zmm or mask registers) belongs to a higher level's kernel namespace (vitpipe::cpu::avx512*, amx), every
AMX tile instruction to the amx level's (vitpipe::cpu::amx), those
namespaces do hold some (or the check proves nothing), and the start-up CPU check uses no AVX at all (it must run
on a CPU below the baseline to say so).

usage: check_isa_confinement.py BINARY
"""
import re
import subprocess
import sys

binary = sys.argv[1]
listing = subprocess.run(["objdump", "-d", "-C", "--insn-width=16", binary], check=True, capture_output=True,
                         text=True).stdout
function = re.compile(r"^[0-9a-f]+ <(.*)>:$")
instruction = re.compile(r"^\s*[0-9a-f]+:\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")
vex_or_evex = re.compile(r"^(?:(?:66|67|f2|f3) )*(c4|c5|62) ")

# A function is a level's when its name involves the level's namespace (its own, or a template instantiated for one
# of its types): only that level's code can reach it.
level_name = re.compile(r"\bvitpipe::cpu::(?:avx512(?:_bf16)?|amx)::")
# AMX's tile instructions (VEX-encoded, so the EVEX test misses them) belong to the amx level alone.
amx_name = re.compile(r"\bvitpipe::cpu::amx::")
tile_instruction = re.compile(r"\b(?:ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilezero|tilerelease|tdpbf16ps|tdpb[su][su]d)\b")
current = None
avx512_functions, outside, checker_avx = set(), [], []
amx_functions, tiles_outside = set(), []
for line in listing.splitlines():
    m = function.match(line)
    if m:
        current = m.group(1)
        continue
    m = instruction.match(line)
    if not m or current is None:
        continue
    raw, text = m.group(1), m.group(2)
    prefix = vex_or_evex.match(raw)
    evex = prefix is not None and prefix.group(1) == "62"
    if evex or "%zmm" in text or re.search(r"%k[0-7]\b", text):
        avx512_functions.add(current)
        if not level_name.search(current):
            outside.append(f"{current}: {text.strip()}")
    if tile_instruction.search(text):
        amx_functions.add(current)
        if not amx_name.search(current):
            tiles_outside.append(f"{current}: {text.strip()}")
    if "refuse_cpu_below_baseline" in current and (prefix is not None or "%ymm" in text):
        checker_avx.append(text.strip())

failures = []
if outside:
    failures.append(f"{len(outside)} AVX-512 instructions outside the level kernels, e.g.:\n  " +
                    "\n  ".join(outside[:10]))
if tiles_outside:
    failures.append(f"{len(tiles_outside)} AMX tile instructions outside the amx level's kernels, e.g.:\n  " +
                    "\n  ".join(tiles_outside[:10]))
if "--expect-amx" in sys.argv and not amx_functions:
    failures.append("no AMX tile instructions in vitpipe::cpu::amx: the amx level was not built")
inside = [f for f in avx512_functions if level_name.search(f)]
if "--expect-avx512" in sys.argv and not inside:
    failures.append("no AVX-512 code in the avx512 kernel namespaces: the levels were not built, or not for AVX-512")
if checker_avx:
    failures.append("the baseline CPU check uses VEX/EVEX instructions: " + "; ".join(checker_avx[:5]))
if not any("refuse_cpu_below_baseline" in line for line in listing.splitlines() if function.match(line)):
    failures.append("the baseline CPU check (refuse_cpu_below_baseline) is not in the binary")
if not outside:
    print(f"{len(inside)} functions with AVX-512 instructions, all in the avx512, avx512_bf16 and amx kernel namespaces")
if not tiles_outside:
    print(f"{len(amx_functions)} functions with AMX tile instructions, all in vitpipe::cpu::amx")
if failures:
    sys.exit("FAIL: " + "\nFAIL: ".join(failures))
print("ok: nothing beyond x86-64-v3 outside the dispatched kernels; the CPU check is plain x86-64")
