#!/usr/bin/env python3
"""Import circles among src/'s files: groups of files that use each other in a loop, through
`crate::` and `super::` paths in production code (comments and inline test modules left out).
A module and its own parent or child are not counted as a circle (the parent declares the
child). Prints each circle, or "no import circles"; exits 1 where there is one.

It also holds src/'s folders to their layers (docs/ARCHITECTURE.md): a folder imports only
folders of a lower layer, so the tree reads from the ground up. Each import that reaches
sideways or up is printed with its file, and exits 1 too.

    python3 bench/import_circles.py [SRC_DIR]
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "src"


def module_of(path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return tuple(rel)


def production(text):
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]") and i + 1 < len(lines) and re.match(r"^(?:pub(?:\([\w:]+\))? )?mod \w+ \{", lines[i + 1]):
            lines = lines[:i]
            break
    text = "\n".join(lines)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def expand(rest):
    """The paths of a `a::b::{c, d::{e}}` group, as lists of names."""
    rest = rest.strip()
    m = re.match(r"([\w:]*?)(?:::)?\{(.*)\}$", rest, re.S)
    if not m:
        return [[p for p in rest.split("::") if p and p != "self"]]
    prefix = [p for p in m.group(1).split("::") if p]
    parts, depth, cur = [], 0, ""
    for ch in m.group(2):
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part.strip():
            for tail in expand(part):
                out.append(prefix + tail)
    return out


def paths(text, here):
    found = []
    for m in re.finditer(r"\b(crate|super)::((?:\w+::)*(?:\w+|\{))", text):
        start = m.start(2)
        body = m.group(2)
        if body.endswith("{"):
            depth, j = 0, start + len(body) - 1
            while j < len(text):
                depth += text[j] == "{"
                depth -= text[j] == "}"
                if depth == 0:
                    break
                j += 1
            body = text[start:j + 1]
        base = () if m.group(1) == "crate" else here[:-1]
        for p in expand(body):
            found.append(base + tuple(p))
    return found


modules = {}
for root, _, names in os.walk(src):
    for n in names:
        if n.endswith(".rs") and n != "main.rs":
            p = os.path.join(root, n)
            modules[module_of(p)] = p

edges = {m: set() for m in modules}
for mod, p in modules.items():
    here = mod if not p.endswith(("mod.rs", "lib.rs")) else mod + ("mod",)
    for target in paths(production(open(p, encoding="utf-8").read()), here):
        best = None
        for k in range(len(target), 0, -1):
            if target[:k] in modules:
                best = target[:k]
                break
        if best is None or best == mod:
            continue
        if best[: len(mod)] == mod or mod[: len(best)] == best:
            continue  # a module and its own child or parent
        edges[mod].add(best)

# Tarjan's strongly connected components.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        scc = []
        while True:
            w = stack.pop()
            on.discard(w)
            scc.append(w)
            if w == v:
                break
        if len(scc) > 1:
            sccs.append(scc)


sys.setrecursionlimit(10000)
for v in sorted(edges):
    if v not in index:
        visit(v)
# The layers, lowest first (docs/ARCHITECTURE.md); folders on one layer do not import each other.
LAYERS = [
    ["guard"],
    ["observe"],
    ["judge", "output"],
    ["knobs"],
    ["probe"],
    ["launch", "decide"],
    ["remember"],
    ["tell", "supervise"],
    ["front"],
    ["error"],
    ["commands", "run"],
    [""],  # lib.rs
]
layer = {folder: i for i, folders in enumerate(LAYERS) for folder in folders}
wrong = []
for mod in sorted(edges):
    top = mod[0] if mod else ""
    for target in sorted(edges[mod]):
        to = target[0] if target else ""
        if top == to:
            continue
        if top not in layer or to not in layer:
            wrong.append(f"  {modules[mod]} -> {'::'.join(target)}: a folder on no layer")
        elif layer[to] >= layer[top]:
            wrong.append(f"  {modules[mod]} -> {'::'.join(target)}: {top or 'lib'} may not import {to}")
for line in wrong:
    print(line)

name = lambda m: "::".join(m) or "lib"
for scc in sccs:
    members = sorted(scc)
    print("circle: " + ", ".join(name(m) for m in members))
    for a in members:
        for b in sorted(edges[a] & set(members)):
            print(f"  {name(a)} -> {name(b)}")
print(f"{len(modules)} files; " + (f"{len(sccs)} import circles" if sccs else "no import circles")
      + "; " + (f"{len(wrong)} imports across the layers" if wrong else "every folder on its layer"))
sys.exit(1 if sccs or wrong else 0)
