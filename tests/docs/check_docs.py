"""The README and docs/ as a new user meets them: the README short enough to read in ten minutes, every link between
them pointing at a file and heading that exist, and every `vitpipe` command in their shell blocks one the binary
takes: a real subcommand, and every flag one its `--help` lists. Commands that need no data are run as written.

    check_docs.py --case length|links|commands|help
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("VITPIPE_SOURCE_DIR", ".")
VITPIPE = os.environ.get("VITPIPE", "build/vitpipe")
MAX_README_LINES = 300
# The vitpipe runs of a case share one deadline, inside ctest's TIMEOUT (300 s): under load (2 cores at load 15) one
# `--help` may take many seconds, which a fixed per-call limit turned into a failure; a hung one still ends the case.
DEADLINE = time.monotonic() + 270


def run_vitpipe(words):
    return subprocess.run([VITPIPE, *words], capture_output=True, text=True,
                          timeout=max(1.0, DEADLINE - time.monotonic()))


def documents():
    paths = [os.path.join(SOURCE, "README.md")]
    docs = os.path.join(SOURCE, "docs")
    paths += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return paths


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    found, in_code = set(), False
    with open(path) as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            elif not in_code and line.startswith("#"):
                found.add(slug(line.lstrip("#")))
    return found


def case_length(failures):
    with open(os.path.join(SOURCE, "README.md")) as f:
        count = sum(1 for _ in f)
    print(f"README.md: {count} lines")
    if count > MAX_README_LINES:
        failures.append(f"README.md has {count} lines, more than {MAX_README_LINES}: move detail into docs/")


def case_links(failures):
    checked = 0
    for path in documents():
        text = open(path).read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            checked += 1
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            where = f"{os.path.relpath(path, SOURCE)}: link ({target})"
            if not os.path.exists(resolved):
                failures.append(f"{where}: no file {os.path.relpath(resolved, SOURCE)}")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                failures.append(f"{where}: no heading #{anchor} in {os.path.relpath(resolved, SOURCE)}")
    print(f"{checked} links checked")


def shell_commands(path):
    """The commands of a document's sh blocks, continuation lines joined, comments dropped."""
    text = open(path).read()
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.split("\n"):
            line = line.split(" # ")[0].strip()
            if line and not line.startswith("#"):
                yield line


def help_text(words, cache):
    key = tuple(words)
    if key not in cache:
        result = run_vitpipe([*words, "--help"])
        cache[key] = result.stdout + result.stderr if result.returncode == 0 else None
    return cache[key]


def case_commands(failures):
    cache, checked, ran = {}, 0, 0
    top = help_text([], cache) or ""
    for path in documents():
        for command in shell_commands(path):
            # The vitpipe invocations in a line (after mpirun/srun, in a pipeline or after &&).
            for part in re.split(r"&&|\|\||;|\|", command):
                try:
                    words = shlex.split(part)
                except ValueError:
                    continue
                if "vitpipe" not in words:
                    continue
                words = words[words.index("vitpipe") + 1:]
                if not words or words[0].startswith("-") or words[0] in ("COMMAND", "..."):
                    continue
                where = f"{os.path.relpath(path, SOURCE)}: `{part.strip()}`"
                sub = [words[0]]
                if words[0] not in top:
                    failures.append(f"{where}: vitpipe has no subcommand '{words[0]}'")
                    continue
                if len(words) > 1 and not words[1].startswith("-"):
                    nested = help_text([words[0], words[1]], cache)
                    if nested is not None and words[1] in (help_text(sub, cache) or ""):
                        sub = [words[0], words[1]]
                text = help_text(sub, cache)
                if text is None:
                    failures.append(f"{where}: `vitpipe {' '.join(sub)} --help` fails")
                    continue
                checked += 1
                for flag in (w.split("=")[0] for w in words if w.startswith("--")):
                    if flag == "--" or "..." in flag:
                        continue
                    if not re.search(re.escape(flag) + r"(?![\w-])", text):
                        failures.append(f"{where}: `vitpipe {' '.join(sub)}` has no flag {flag}")
    # What needs no data runs as written.
    with tempfile.TemporaryDirectory() as root:
        for words in (["info"], ["info", "--json"], ["init", "--preset", "vit-micro", "--out",
                                                      os.path.join(root, "tiny-model")]):
            result = run_vitpipe(words)
            ran += 1
            if result.returncode != 0:
                failures.append(f"`vitpipe {' '.join(words)}` exits {result.returncode}: {result.stderr.strip()}")
    print(f"{checked} vitpipe commands checked against --help, {ran} run")


def case_help(failures):
    """Every subcommand's --help as a user reads it: no CLI11 "{false}" after a flag (which reads as its default),
    and every on/off flag of train says its default."""
    cache = {}
    top = help_text([], cache) or ""
    subcommands = re.findall(r"^  (\w+)\s", top.split("SUBCOMMANDS:")[-1], flags=re.M)
    for sub in subcommands:
        text = help_text([sub], cache) or ""
        for line in text.splitlines():
            if re.match(r"\s+--\S*\{(true|false)\}", line):
                failures.append(f"vitpipe {sub} --help: {line.strip()}")
    text = help_text(["train"], cache) or ""
    entries = re.split(r"\n(?=  -)", text)
    for entry in entries:
        if re.match(r"  --([\w-]+),--no-", entry) and "default" not in entry:
            failures.append(f"vitpipe train --help: no default said for {entry.split()[0]}")
    print(f"{len(subcommands)} subcommands' help read")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=["length", "links", "commands", "help"])
    case = parser.parse_args().case
    failures = []
    {"length": case_length, "links": case_links, "commands": case_commands, "help": case_help}[case](failures)
    for failure in failures:
        print("FAIL:", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
