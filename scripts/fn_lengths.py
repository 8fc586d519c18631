#!/usr/bin/env python3
"""Lengths of the OpenCL C functions under cl/: from the signature's first
line to the closing brace (a '{' and '}' at column 0, or a signature line
ending in '{'). Prints those of at least MIN lines (default 150)."""
import pathlib, re, sys

NOT_NAMES = {"__attribute__", "reqd_work_group_size", "aligned", "always_inline"}


def functions(path):
    lines = path.read_text().split("\n")
    out = []
    for i, line in enumerate(lines):
        if not (line == "{" or (re.match(r"^[A-Za-z_].*\)\s*\{$", line))):
            continue
        start = i
        if line == "{":
            while start > 0:
                prev = lines[start - 1]
                if (not prev.strip() or prev.startswith("#") or prev.rstrip().endswith((";", "*/", "}"))
                        or prev.lstrip().startswith(("/*", "*", "//"))):
                    break
                start -= 1
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("}"))
        names = [n for n in re.findall(r"(\w+)\s*\(", " ".join(lines[start:i + 1]))
                 if n not in NOT_NAMES]
        out.append((end - start + 1, names[0] if names else "?", start + 1))
    return out

least = int(sys.argv[1]) if len(sys.argv) > 1 else 150
root = pathlib.Path(__file__).resolve().parent.parent / "cl"
for path in sorted(root.rglob("*.cl*")):
    for n, name, line in functions(path):
        if n >= least:
            print(f"{n:5d}  {path.relative_to(root.parent)}:{line}  {name}")
