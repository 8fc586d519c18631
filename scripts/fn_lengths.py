#!/usr/bin/env python3
"""Lengths of the OpenCL C functions under cl/, from the first line of a
function's signature to its closing brace (a body that opens with '{' at
column 0, or a signature line ending in '{', and closes with '}' at column
0; functions written by macros are not counted). Body fragments a kernel
includes (cl/nvidia/mma/, cl/inference/split_*_*.clh) count where they
stand, not in the kernel that includes them.

  scripts/fn_lengths.py [MIN]     functions of MIN lines or more (150)
  scripts/fn_lengths.py --check N exits 1 when a function is over N lines
                                  (ctest kernel_function_lengths: issue
                                  47's "no kernel function over 250")
"""
import pathlib
import re
import sys

NOT_NAMES = {"__attribute__", "reqd_work_group_size", "aligned",
             "always_inline"}


def functions(path):
    """(lines, name, first line) of each function defined in `path`."""
    lines = path.read_text().split("\n")
    out = []
    for i, line in enumerate(lines):
        if not (line == "{" or re.match(r"^[A-Za-z_].*\)\s*\{$", line)):
            continue
        start = i
        if line == "{":
            while start > 0:
                prev = lines[start - 1]
                if (not prev.strip() or prev.startswith("#")
                        or prev.rstrip().endswith((";", "*/", "}"))
                        or prev.lstrip().startswith(("/*", "*", "//"))):
                    break
                start -= 1
        end = next(j for j in range(i + 1, len(lines))
                   if lines[j].startswith("}"))
        names = [n for n in re.findall(r"(\w+)\s*\(",
                                       " ".join(lines[start:i + 1]))
                 if n not in NOT_NAMES]
        out.append((end - start + 1, names[0] if names else "?", start + 1))
    return out


def main(argv):
    check = len(argv) > 1 and argv[1] == "--check"
    least = int(argv[2] if check else argv[1] if len(argv) > 1 else 150)
    root = pathlib.Path(__file__).resolve().parent.parent
    over = 0
    for path in sorted((root / "cl").rglob("*.cl*")):
        for n, name, line in functions(path):
            if (n > least) if check else (n >= least):
                over += 1
                print(f"{n:5d}  {path.relative_to(root)}:{line}  {name}")
    if check and over:
        print(f"fn_lengths: {over} function(s) over {least} lines")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
