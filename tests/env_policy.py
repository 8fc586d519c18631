#!/usr/bin/env python3
"""The library's environment variables against docs/environment.md.

Every FLASHCL_* variable the library or the tool reads with plain getenv
must be in the document's "What users set" table, and every one read with
dev_getenv (developer builds only, src/core/dev_env.h) in its developers'
table; a measurement knob read with plain getenv would change a user's
build, and an undocumented variable is one nobody can find. Also fails when
a table names a variable nothing reads any more. Usage: env_policy.py ROOT
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
doc = (root / "docs/environment.md").read_text(encoding="utf-8")
user_part, _, dev_part = doc.partition("## Developers' comparison knobs")


def documented(part):
    names = set()
    for line in part.splitlines():
        if line.startswith("|"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`(FLASHCL_[A-Z0-9_]+\*?)`", first_cell))
    return names


def covered(name, names):
    return name in names or any(
        n.endswith("*") and name.startswith(n[:-1]) for n in names)


plain, dev = set(), set()
for path in list((root / "src").rglob("*.c")) + list((root / "cli").rglob("*.c")):
    text = path.read_text(encoding="utf-8", errors="replace")
    plain.update(re.findall(r'(?<![_a-z])getenv\("(FLASHCL_[A-Z0-9_]+)"\)', text))
    dev.update(re.findall(r'dev_getenv\("(FLASHCL_[A-Z0-9_]+)"\)', text))
# a variable read through a named constant (REF_SCRATCH_ENV and the like)
for path in (root / "src").rglob("*.[ch]"):
    text = path.read_text(encoding="utf-8", errors="replace")
    plain.update(re.findall(r'#define [A-Z_]*ENV "(FLASHCL_[A-Z0-9_]+)"', text))

users, devs = documented(user_part), documented(dev_part)
problems = []
for name in sorted(plain):
    if not covered(name, users):
        where = "a developers' knob" if covered(name, devs) else "undocumented"
        problems.append(f"{name}: read with plain getenv but {where} "
                        "(users' variables: docs/environment.md's first table)")
for name in sorted(dev):
    if not covered(name, devs):
        problems.append(f"{name}: read with dev_getenv but not in the "
                        "developers' table of docs/environment.md")
read = plain | dev
for name in sorted(users | devs):
    if name == "FLASHCL_LIBRARY":  # read by the Python package
        continue
    if not any(r == name or (name.endswith("*") and r.startswith(name[:-1]))
               for r in read):
        problems.append(f"{name}: documented in docs/environment.md but "
                        "nothing reads it")
for p in problems:
    print(p)
print(f"{len(plain)} users' variables, {len(dev)} developers' knobs read; "
      f"{len(problems)} problems")
sys.exit(1 if problems else 0)
