#!/usr/bin/env python3
"""Lists what makes the code hard to live in: functions over 80 lines, files over 800, and
include cycles between units (a unit is foo.h with foo.cpp).

Usage: scripts/code_shape.py [--strict] [DIR ...]   (default: the product's folders)

Functions come from universal-ctags (their start and end lines; lambdas count in the function
around them). A data table (a file or function that is mostly initializer rows) is still listed:
decide by reading it. --strict exits 1 when anything is listed; without it the script only
reports, which is what CI does.
"""
import argparse
import json
import os
import re
import subprocess
import sys

FUNCTION_LIMIT = 80
FILE_LIMIT = 800
DEFAULT_DIRS = ["actors", "runtime", "kernels", "topology", "tools", "examples"]
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(dirs):
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if SOURCE.search(f):
                    yield os.path.normpath(os.path.join(root, f))


def long_functions(files):
    out = subprocess.run(["ctags", "--output-format=json", "--fields=+nezK", "--kinds-c++=f", "--language-force=C++",
                          "-o", "-"] + files, capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag" or tag["name"].startswith("__anon") or "end" not in tag:
            continue
        length = tag["end"] - tag["line"] + 1
        if length > FUNCTION_LIMIT:
            found.append((length, tag["path"], tag["line"], tag.get("scope", "") + "::" + tag["name"] if tag.get("scope") else tag["name"]))
    return sorted(found, reverse=True)


def unit(path):
    return os.path.splitext(path)[0]


def include_cycles(files):
    known = {unit(f) for f in files}
    graph = {}
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            deps = {unit(os.path.normpath(i)) for i in INCLUDE.findall(fh.read())}
        graph.setdefault(unit(f), set()).update(d for d in deps if d in known and d != unit(f))
    # Tarjan's strongly connected components; a component of more than one unit is a cycle.
    index, low, stack, on_stack, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(comps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", default=DEFAULT_DIRS)
    ap.add_argument("--strict", action="store_true", help="exit 1 when anything is listed")
    args = ap.parse_args()
    files = list(sources(d for d in args.dirs if os.path.isdir(d)))
    funcs = long_functions(files)
    big = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            n = sum(1 for _ in fh)
        if n > FILE_LIMIT:
            big.append((n, f))
    cycles = include_cycles(files)
    print(f"code shape: {len(files)} files; {len(funcs)} functions over {FUNCTION_LIMIT} lines, "
          f"{len(big)} files over {FILE_LIMIT}, {len(cycles)} include cycles")
    for n, path, line, name in funcs:
        print(f"  function {n:4d} lines  {path}:{line}  {name}")
    for n, path in sorted(big, reverse=True):
        print(f"  file     {n:4d} lines  {path}")
    for c in cycles:
        print("  cycle    " + " <-> ".join(c))
    return 1 if args.strict and (funcs or big or cycles) else 0


if __name__ == "__main__":
    sys.exit(main())
