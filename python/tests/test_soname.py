"""The system loader route (no FLASHCL_LIBRARY, no bundled copy, no
in-tree build), as with a run-time install that holds only the SONAME's
name: the package asks for libflashcl.so.0.MINOR (README's ABI policy)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import flashcl
from flashcl import _lib


def test_soname_follows_the_abi_policy():
    v = _lib.version_number()
    assert v // 10000 == 0, "from 1.0 on the SONAME is libflashcl.so.MAJOR"
    assert _lib._SONAME == f"libflashcl.so.0.{v // 100 % 100}"


def test_system_loader_finds_the_soname(tmp_path):
    library = Path(flashcl.library_path).resolve()
    libdir = tmp_path / "lib"
    libdir.mkdir()
    # only that name: no libflashcl.so for ctypes.util.find_library
    (libdir / _lib._SONAME).symlink_to(library)
    site = tmp_path / "site"
    shutil.copytree(Path(flashcl.__file__).resolve().parent, site / "flashcl",
                    ignore=shutil.ignore_patterns("_lib", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "FLASHCL_LIBRARY"}
    env.update(PYTHONPATH=str(site), LD_LIBRARY_PATH=str(libdir))
    run = subprocess.run(
        [sys.executable, "-c",
         "import flashcl; print(flashcl.library_source, flashcl.library_path)"],
        env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    source, found = run.stdout.split()
    assert source == "system"
    assert Path(found).resolve() == library
