#!/usr/bin/env python3
"""Turns a CUDA source file into host C++ for the emulation in tools/cuda_emulation/include (see README.md).

    transform.py KERNEL.cu OUT_DIR [--src SRC_ROOT]

writes OUT_DIR/<name>.cpp, and OUT_DIR/include/<path> for every header under SRC_ROOT (default: the
repository's src/) that the file includes, directly or not, and that declares __shared__ memory or
launches a kernel; compile with -I OUT_DIR/include ahead of the emulation's include/ and SRC_ROOT. Rewrites:

  extern __shared__ T name[];         T* name = reinterpret_cast<T*>(emu::dynamic_shared());
  __shared__ T a[N], b;               auto& a = emu::static_shared<T[N]>(id); auto& b = ...  (one per block)
  kernel<<<grid, block, smem, s>>>(args);   emu::launch(grid, block, smem, s, [&](auto... a) { kernel(a...); }, args);

Anything else it cannot place (a launch or a __shared__ it does not parse) is an error naming the line."""
import argparse
import os
import re
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SHIMS = os.path.join(HERE, "include")
REPO_SRC = os.path.normpath(os.path.join(HERE, "..", "..", "src"))
ALIGN = re.compile(r"__align__\s*\(\s*\d+\s*\)")


class TransformError(Exception):
    pass


def read(path):
    with open(path) as f:
        return f.read()


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def in_comment(text, pos):
    """True when text[pos] follows a // on its line (a mention in a comment, not code)."""
    return "//" in text[text.rfind("\n", 0, pos) + 1:pos]


def split_top(text):
    """`text` split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def balanced_end(text, pos, open_ch, close_ch):
    """Index just past the bracket that closes the one at text[pos]."""
    depth = 0
    for i in range(pos, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    raise TransformError(f"line {line_of(text, pos)}: no closing {close_ch}")


def rewrite_dynamic_shared(text):
    pattern = re.compile(r"extern\s+__shared__\s+([^;\[\n]+?)\s+(\w+)\s*\[\s*\]\s*;")

    def repl(m):
        type_ = ALIGN.sub("", m.group(1)).strip()
        return f"{type_}* {m.group(2)} = reinterpret_cast<{type_}*>(emu::dynamic_shared());"

    return pattern.sub(repl, text)


def rewrite_static_shared(text, path):
    out, pos = [], 0
    for m in re.finditer(r"__shared__\s+([^;{}\n]*?);", text):
        if in_comment(text, m.start()):
            continue
        decl = ALIGN.sub("", m.group(1)).strip()
        declarators = split_top(decl)
        first = re.fullmatch(r"(.*\S)\s+(\w+)\s*((?:\[[^\]]*\]\s*)*)", declarators[0], re.S)
        if not first:
            raise TransformError(f"{path}:{line_of(text, m.start())}: cannot parse __shared__ {decl}")
        type_ = first.group(1)
        names = [(first.group(2), first.group(3))]
        for d in declarators[1:]:
            more = re.fullmatch(r"(\w+)\s*((?:\[[^\]]*\]\s*)*)", d)
            if not more:
                raise TransformError(f"{path}:{line_of(text, m.start())}: cannot parse __shared__ declarator {d}")
            names.append((more.group(1), more.group(2)))
        line = line_of(text, m.start())
        decls = []
        for name, dims in names:
            key = zlib.crc32(f"{os.path.basename(path)}:{line}:{name}".encode()) & 0x7FFFFFFF
            decls.append(f"auto& {name} = emu::static_shared<{type_}{dims.replace(' ', '')}>({key});")
        out.append(text[pos:m.start()] + " ".join(decls))
        pos = m.end()
    return "".join(out) + text[pos:]


def kernel_name_start(text, end):
    """Start of the kernel expression ending at `end` (a name with :: and template arguments)."""
    i = end
    while True:
        while i > 0 and text[i - 1] in " \t\n":
            i -= 1
        if i > 0 and text[i - 1] == ">":  # template arguments: walk back to the matching <
            depth = 0
            while i > 0:
                i -= 1
                depth += {">": 1, "<": -1}.get(text[i], 0)
                if depth == 0:
                    break
        j = i
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_:"):
            j -= 1
        if j == i:
            raise TransformError(f"line {line_of(text, end)}: no kernel name before <<<")
        return j


def rewrite_launches(text):
    out, pos = [], 0
    while True:
        start = text.find("<<<", pos)
        if start < 0:
            return "".join(out) + text[pos:]
        if in_comment(text, start):
            out.append(text[pos:start + 3])
            pos = start + 3
            continue
        name_start = kernel_name_start(text, start)
        close = text.find(">>>", start)
        paren = text.find("(", close)
        if close < 0 or paren < 0 or text[close + 3:paren].strip():
            raise TransformError(f"line {line_of(text, start)}: a launch without >>>(arguments)")
        args_end = balanced_end(text, paren, "(", ")")
        config = split_top(text[start + 3:close])
        if not 2 <= len(config) <= 4:
            raise TransformError(f"line {line_of(text, start)}: launch configuration {config}")
        shared = config[2] if len(config) > 2 else "0"
        stream = config[3] if len(config) > 3 else "nullptr"
        args = text[paren + 1:args_end - 1].strip()
        kernel = text[name_start:start].strip()
        call = (f"emu::launch({config[0]}, {config[1]}, {shared}, {stream}, [&](auto... a) {{ {kernel}(a...); }}"
                f"{', ' + args if args else ''})")
        out.append(text[pos:name_start] + call)
        pos = args_end


def transform(text, path):
    text = rewrite_dynamic_shared(text)
    text = rewrite_static_shared(text, path)
    return rewrite_launches(text)


def project_headers(path, src_root, seen):
    """Headers under src_root that `path` includes, directly or through others (shims excluded)."""
    for include in re.findall(r'#include\s+"([^"]+)"', read(path)):
        full = os.path.join(src_root, include)
        if include in seen or os.path.exists(os.path.join(SHIMS, include)) or not os.path.exists(full):
            continue
        seen.add(include)
        project_headers(full, src_root, seen)
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel")
    parser.add_argument("out_dir")
    parser.add_argument("--src", default=REPO_SRC, help="the include root of the project (default: src/)")
    a = parser.parse_args()
    try:
        os.makedirs(a.out_dir, exist_ok=True)
        jobs = [(a.kernel, os.path.join(a.out_dir, os.path.splitext(os.path.basename(a.kernel))[0] + ".cpp"))]
        for include in sorted(project_headers(a.kernel, a.src, set())):
            jobs.append((os.path.join(a.src, include), os.path.join(a.out_dir, "include", include)))
        for i, (source, target) in enumerate(jobs):
            text = read(source)
            rewritten = transform(text, source)
            if i > 0 and rewritten == text:
                continue  # a header with nothing to rewrite is read from SRC_ROOT
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as f:
                f.write(f'#line 1 "{os.path.abspath(source)}"\n' + rewritten)
    except (TransformError, OSError) as e:
        sys.exit(f"transform.py: {e}")


if __name__ == "__main__":
    main()
