#!/usr/bin/env bash
# `vitpipe data prepare` end to end: makes a cache, inspects it through cache:DIR, refuses a stale one, and (with the
# source gone) evaluates the cache by sex, age band and view from what the cache kept.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/images"
cp "$VITPIPE_SOURCE_DIR"/data/chestxray14-sample/*.csv "$VITPIPE_SOURCE_DIR"/data/chestxray14-sample/*.txt "$work/src/"
ln -s "$VITPIPE_SOURCE_DIR"/data/chestxray14-sample/images/* "$work/src/images/"
"$VITPIPE" data prepare --data "chestxray14:$work/src" --image-size 24 --out "$work/cache" 2> "$work/log"
grep -q "1000 images" "$work/log" || { cat "$work/log"; exit 1; }
total=$("$VITPIPE" data inspect --data "cache:$work/cache" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
[[ "$total" == 1000 ]] || { echo "cache total $total"; exit 1; }
echo "x" >> "$work/src/test_list.txt"
if "$VITPIPE" data inspect --data "cache:$work/cache" --json 2> "$work/err"; then echo "stale cache accepted"; exit 1; fi
grep -q "stale" "$work/err" || { cat "$work/err"; exit 1; }
# Subgroups from the cache alone (issue 44): with the source gone, eval of the cache still reports the test split by
# sex, age band and view, as the cache kept them (format version 4).
sed -i '$ d' "$work/src/test_list.txt"
"$VITPIPE" data prepare --data "chestxray14:$work/src" --image-size 32 --out "$work/cache32" 2> "$work/log"
rm -rf "$work/src"
"$VITPIPE" init --preset vit-micro --seed 1 --out "$work/model" > /dev/null 2>&1
"$VITPIPE" eval --model "$work/model" --data "cache:$work/cache32" --split test --json --threads 1 2> "$work/err" |
  /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
groups = {(g["attribute"], g["group"]): g["images"] for g in j["subgroups"]}
by = lambda a: sum(n for (attribute, _), n in groups.items() if attribute == a)
assert {a for a, _ in groups} == {"sex", "age", "view"}, groups
print("subgroups from the cache:", groups, file=sys.stderr)
assert by("sex") == j["rows"] and by("view") == j["rows"] and 0 < by("age") <= j["rows"], (groups, j["rows"])
' || { echo "eval of the cache without its source: no sex / age / view subgroups"; cat "$work/err"; exit 1; }
grep -q "not here" "$work/err" || { echo "no warning that the source is gone"; cat "$work/err"; exit 1; }
echo "data prepare: ok"
