#!/usr/bin/env bash
# `vitpipe data prepare` end to end: makes a cache, inspects it through cache:DIR, and refuses a stale one.
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
echo "data prepare: ok"
