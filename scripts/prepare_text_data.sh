#!/usr/bin/env bash
# Prepares the bytelm training text (scripts/prepare_text_data.py says how it is cleaned and split) on a
# fresh Debian 12 machine, as root or with sudo: installs the text packages, writes data/text/{train,
# heldout}.txt and manifest.json, and data/text.tar.zst to carry to a machine without package access.
#   scripts/prepare_text_data.sh [OUT]        (default OUT = data/text)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/text}

# bible-kjv reads bible-kjv-text's compressed data (the `bible` program is the only reader of its format).
wanted=(bible-kjv-text bible-kjv dict-gcide dict-wn dict-jargon dict-foldoc fortunes python3 zstd)
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
available=()
for p in "${wanted[@]}"; do
  if apt-cache show "$p" >/dev/null 2>&1; then available+=("$p"); else echo "prepare_text_data: package $p does not exist here; skipping it" >&2; fi
done
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${available[@]}" >/dev/null

sources=()
dpkg-query -W bible-kjv 2>/dev/null | grep -q . && command -v bible >/dev/null && sources+=(bible)
for d in gcide wn jargon foldoc; do [ -f "/usr/share/dictd/$d.index" ] && sources+=("$d"); done
[ -d /usr/share/games/fortunes ] && sources+=(fortunes)
list=$(IFS=,; echo "${sources[*]}")
echo "prepare_text_data: sources $list -> $out" >&2
python3 scripts/prepare_text_data.py --out "$out" --sources "$list"
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | zstd -q -19 -T0 -f -o "$out.tar.zst"
ls -l "$out" "$out.tar.zst" >&2
