#!/usr/bin/env python3
"""Builds the bytelm training text from Debian packages: cleans, deduplicates and splits it.

Sources (installed by scripts/prepare_text_data.sh):
  * bible-kjv-text: read through the `bible` program (package bible-kjv), one document per chapter.
  * dict-gcide, dict-wn, dict-jargon, dict-foldoc: dictd databases. A database is NAME.index (one line
    per headword: headword TAB offset TAB length, the numbers in dictd's base-64 digits
    A-Z a-z 0-9 + /, most significant first) and NAME.dict.dz (dictzip, which is gzip with random
    access, so gzip reads it whole). One document per distinct (offset, length): several headwords
    can point at one entry. Entries whose headword starts with "00-database" / "00database" are the
    database's own metadata and are skipped.
  * fortunes: /usr/share/games/fortunes/NAME, fortunes separated by lines holding only "%".

Cleaning: dictionary cross-reference braces {word} become word; gcide's pronunciation \\Ap"ple\\ is
dropped; lines holding only a short bracketed source tag ([1913 Webster], [PJC], [73-07-29]) are
dropped; a dictionary entry's wrapped lines are joined into paragraphs (one line each). Fortunes keep
their line layout (verse, ASCII art). Bible chapters lose the verse numbers.

Deduplication: a document whose whitespace-collapsed, lower-cased text was already seen is dropped.
Split: the held-out set is every document whose SHA-256 (of its cleaned bytes) has a first byte
< HELDOUT_BELOW (5 of 256, about 2%); the rule depends only on the document, so it is the same on
every machine and for any order of sources. Documents are written in source order, separated by a
blank line.
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys

HELDOUT_BELOW = 5  # first SHA-256 byte < 5 → held out (5/256 ≈ 2%)
DICTS = ["gcide", "wn", "jargon", "foldoc"]
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def dictd_number(text):
    value = 0
    for ch in text:
        value = value * 64 + B64.index(ch)
    return value


def package_version(name):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


BRACES = re.compile(r"\{([^{}]*)\}")
PRONUNCIATION = re.compile(r"\s*\\[^\\]{1,80}\\")
# gcide's character escapes for accented letters (["e], [a^], [~e], [=a], ...): keep the bare letter.
GCIDE_ACCENT = re.compile(r"\[(?=[^\]]*[\"~^`'=-])[\"~^`'=-]?([A-Za-z]{1,2})[\"~^`'=-]?\]")
GCIDE_NAMED = {"[ae]": "æ", "[AE]": "Æ", "[oe]": "œ", "[OE]": "Œ", "[deg]": "°", "[aum]": "ä", "[eth]": "ð",
               "[thorn]": "þ", "[frac12]": "½", "[frac14]": "¼", "[frac34]": "¾", "[sect]": "§", "[pound]": "£"}
# gcide's source tags inside a paragraph: [1913 Webster], [Webster 1913 Suppl.], [PJC], [WordNet 1.5].
GCIDE_SOURCE = re.compile(r"\s*\[(?:1913 Webster|Webster 1913 Suppl\.|WordNet 1\.5|Century Dict\.|PJC|RP|JC)[^\]]*\]")
SOURCE_TAG_LINE = re.compile(r"^\s*\[[^\]\n]{1,40}\]\s*$")
SPACES = re.compile(r"[ \t]+")


def clean_dict_entry(raw, name):
    text = raw.replace("\r", "")
    for _ in range(3):  # nested braces in a few gcide entries
        text = BRACES.sub(r"\1", text)
    paragraphs, current = [], []
    for line in text.split("\n"):
        if SOURCE_TAG_LINE.match(line):
            continue
        line = SPACES.sub(" ", line).strip()
        if not line:
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        current.append(line)
    if current:
        paragraphs.append(" ".join(current))
    text = "\n".join(paragraphs).strip()
    if name == "gcide":  # after joining, since a pronunciation can wrap across lines
        text = GCIDE_SOURCE.sub("", PRONUNCIATION.sub("", GCIDE_ACCENT.sub(r"\1", text)))
        for escape, letter in GCIDE_NAMED.items():
            text = text.replace(escape, letter)
    return text


def dict_documents(name, directory):
    index_path = os.path.join(directory, name + ".index")
    dict_path = os.path.join(directory, name + ".dict.dz")
    if not (os.path.exists(index_path) and os.path.exists(dict_path)):
        sys.exit(f"prepare_text_data: {index_path} or {dict_path} missing: install dict-{name}")
    body = gzip.open(dict_path).read()
    seen = set()
    with open(index_path, encoding="utf-8", errors="replace") as index:
        for line_no, line in enumerate(index, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3:
                sys.exit(f"prepare_text_data: {index_path}:{line_no}: expected headword, offset, length")
            if fields[0].startswith("00-database") or fields[0].startswith("00database"):
                continue
            offset, length = dictd_number(fields[1]), dictd_number(fields[2])
            if offset + length > len(body):
                sys.exit(f"prepare_text_data: {index_path}:{line_no}: entry {offset}+{length} runs past "
                         f"the {len(body)}-byte dictionary")
            if (offset, length) in seen:
                continue
            seen.add((offset, length))
            raw = body[offset:offset + length].decode("utf-8", errors="replace")
            yield raw, clean_dict_entry(raw, name)


def bible_documents():
    out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], capture_output=True, check=True)
    text = out.stdout.decode("utf-8", errors="replace")
    chapter = re.compile(r"^([1-3]?\s?[A-Z][A-Za-z ]+ \d+)$", re.M)
    parts = chapter.split(text)
    # parts = [preamble, title, body, title, body, ...]
    for i in range(1, len(parts) - 1, 2):
        title, body = parts[i], parts[i + 1]
        verses = [re.sub(r"^\s*\d+ ", "", line).strip() for line in body.split("\n") if line.strip()]
        raw = title + body
        yield raw, title + "\n" + "\n".join(verses)


def fortune_documents(directory):
    if not os.path.isdir(directory):
        sys.exit(f"prepare_text_data: {directory} missing: install fortunes")
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if "." in name or os.path.islink(path) or not os.path.isfile(path):
            continue  # NAME.dat is the index, NAME.u8 a link to NAME
        text = open(path, encoding="utf-8", errors="replace").read().replace("\r", "")
        for fortune in re.split(r"^%$", text, flags=re.M):
            lines = [line.rstrip() for line in fortune.strip("\n").split("\n")]
            raw = fortune
            cleaned = "\n".join(lines).strip("\n")
            if cleaned.strip():
                yield raw, cleaned


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data/text", help="output folder (default data/text)")
    parser.add_argument("--dictd", default="/usr/share/dictd", help="dictd databases (default /usr/share/dictd)")
    parser.add_argument("--fortunes", default="/usr/share/games/fortunes",
                        help="fortune files (default /usr/share/games/fortunes)")
    parser.add_argument("--sources", default="bible,gcide,wn,jargon,foldoc,fortunes",
                        help="comma-separated sources to use (default all)")
    args = parser.parse_args()

    sources = [s for s in args.sources.split(",") if s]
    packages = {"bible": "bible-kjv-text", "fortunes": "fortunes"}
    os.makedirs(args.out, exist_ok=True)
    seen = set()
    train_path, heldout_path = os.path.join(args.out, "train.txt"), os.path.join(args.out, "heldout.txt")
    manifest = {"split_rule": f"sha256(document)[0] < {HELDOUT_BELOW} -> heldout",
                "document_separator": "blank line", "sources": []}
    with open(train_path + ".tmp", "wb") as train, open(heldout_path + ".tmp", "wb") as heldout:
        for source in sources:
            if source == "bible":
                docs = bible_documents()
            elif source == "fortunes":
                docs = fortune_documents(args.fortunes)
            elif source in DICTS:
                docs = dict_documents(source, args.dictd)
            else:
                sys.exit(f"prepare_text_data: --sources: unknown source '{source}' "
                         f"(known: bible, {', '.join(DICTS)}, fortunes)")
            stats = {"name": source, "package": packages.get(source, "dict-" + source),
                     "version": package_version(packages.get(source, "dict-" + source)),
                     "documents": 0, "duplicates": 0, "raw_bytes": 0, "train_bytes": 0, "heldout_bytes": 0,
                     "train_documents": 0, "heldout_documents": 0}
            for raw, cleaned in docs:
                stats["documents"] += 1
                stats["raw_bytes"] += len(raw.encode("utf-8"))
                if not cleaned:
                    continue
                key = hashlib.sha256(" ".join(cleaned.lower().split()).encode("utf-8")).digest()
                if key in seen:
                    stats["duplicates"] += 1
                    continue
                seen.add(key)
                data = (cleaned + "\n\n").encode("utf-8")
                held = hashlib.sha256(cleaned.encode("utf-8")).digest()[0] < HELDOUT_BELOW
                (heldout if held else train).write(data)
                part = "heldout" if held else "train"
                stats[part + "_bytes"] += len(data)
                stats[part + "_documents"] += 1
            print(f"prepare_text_data: {source}: {stats['documents']} documents, {stats['duplicates']} duplicates, "
                  f"train {stats['train_bytes']} B, held-out {stats['heldout_bytes']} B", file=sys.stderr)
            manifest["sources"].append(stats)
    for path in (train_path, heldout_path):
        os.replace(path + ".tmp", path)
        blob = open(path, "rb").read()
        manifest[os.path.basename(path)] = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    with open(os.path.join(args.out, "manifest.json.tmp"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(args.out, "manifest.json.tmp"), os.path.join(args.out, "manifest.json"))


if __name__ == "__main__":
    main()
