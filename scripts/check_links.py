#!/usr/bin/env python3
"""Check the relative links of Markdown files: every [text](path) and
[text](path#anchor) that is not a URL must name a file or folder that
exists, and an anchor must match a heading of the target.

    python3 scripts/check_links.py                  # README.md, docs/, bench/
    python3 scripts/check_links.py FILE.md ...
    python3 scripts/check_links.py --pending docs/install.md README.md

--pending PATH (repeatable) accepts links to a file another branch adds,
so a document can link it before the merge; a pending link is listed, not
failed. Exit status 1 if a link is broken.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def anchor_of(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lstrip("#").strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    found, fenced = set(), False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(anchor_of(line))
    return found


def links(path):
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):
                yield number, target


def check(path, pending):
    broken, waiting = [], []
    for number, target in links(path):
        file_part, _, anchor = target.partition("#")
        where = f"{os.path.relpath(path, ROOT)}:{number}: {target}"
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
            if file_part else path
        if os.path.relpath(resolved, ROOT) in pending:
            waiting.append(where)
        elif not os.path.exists(resolved):
            broken.append(f"{where} (no such file)")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            broken.append(f"{where} (no heading #{anchor})")
    return broken, waiting


def default_files():
    files = [os.path.join(ROOT, "README.md")]
    for folder in ("docs", "bench"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".md")]
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--pending", action="append", default=[],
                    help="a path (from the repository root) another branch adds")
    args = ap.parse_args()
    pending = {os.path.normpath(p) for p in args.pending}
    files = [os.path.abspath(f) for f in args.files] or default_files()
    broken, waiting, count = [], [], 0
    for path in files:
        b, w = check(path, pending)
        broken += b
        waiting += w
        count += sum(1 for _ in links(path))
    for line in waiting:
        print("pending:", line)
    for line in broken:
        print("broken:", line)
    print(f"{count} links in {len(files)} files, {len(broken)} broken, {len(waiting)} pending")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
