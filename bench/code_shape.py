#!/usr/bin/env python3
"""The shape of src/: files, the largest files, the longest functions and those with the most
parameters, production code only (each file's `#[cfg(test)] mod` is left out).

    python3 bench/code_shape.py [SRC_DIR] [--top N]

A reading of the text, not of the compiler: a function is `fn NAME(` up to the `}` at its own
indentation; parameters are the top-level commas of its signature, `self` not counted.
"""
import os
import re
import sys

FN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def production_lines(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]") and i + 1 < len(lines) and re.match(r"^(?:pub(?:\([\w:]+\))? )?mod \w+ \{", lines[i + 1]):
            return lines[:i]
    return lines


def params(signature):
    inner = signature[signature.index("(") + 1:]
    depth, count, seen = 0, 0, False
    for ch in inner:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
            seen = False
            continue
        if not ch.isspace():
            seen = True
    count += 1 if seen else 0
    has_self = re.match(r"\s*&?\s*(?:'\w+\s+)?(?:mut\s+)?self\b", inner) is not None
    return count - (1 if has_self else 0)


def functions(path):
    lines = production_lines(path)
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        indent, name = m.group(1), m.group(2)
        sig, j = line, i
        while "{" not in lines[j] and not lines[j].rstrip().endswith(";") and j + 1 < len(lines):
            j += 1
            sig += " " + lines[j].strip()
        if "{" not in lines[j]:
            continue
        end = j
        if not lines[j].rstrip().endswith("}"):
            end = next((k for k in range(j + 1, len(lines)) if lines[k] == indent + "}"), j)
        yield name, end - i + 1, params(sig[sig.index("fn " + name):])


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 5
    if "--top" in sys.argv:
        args.remove(str(top))
    src = args[0] if args else "src"
    files, fns = [], []
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(root, n)
                total = len(open(p, encoding="utf-8").read().split("\n")) - 1
                files.append((total, len(production_lines(p)), p))
                fns += [(length, nparams, f"{p}:{name}") for name, length, nparams in functions(p)]
    files.sort(reverse=True)
    print(f"files: {len(files)}, lines: {sum(f[0] for f in files)}")
    print("largest files (lines, of which production):")
    for total, prod, p in files[:top]:
        print(f"  {total:6} {prod:6}  {p}")
    print("longest functions (lines):")
    for length, _, name in sorted(fns, reverse=True)[:top]:
        print(f"  {length:6}  {name}")
    print("most parameters:")
    for n, length, name in sorted(((n, l, name) for l, n, name in fns), reverse=True)[:top]:
        print(f"  {n:6}  {name}")
    print(f"functions with 4 or more parameters: {sum(1 for _, n, _ in fns if n >= 4)}")


main()
