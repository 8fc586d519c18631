"""Build hook: bundle libflashcl (and the header it was built from) into
the package, so that an installed `flashcl` needs no environment variable.

Where the library comes from, first that applies:

* FLASHCL_BUNDLE=0: bundle nothing; at run time the package then finds the
  library through FLASHCL_LIBRARY or the system loader (an installed
  libflashcl, e.g. `cmake --install build-release --prefix /usr/local`).
* FLASHCL_LIBRARY_DIR=DIR: copy DIR/libflashcl.so (a build folder such as
  build-test, or an install's lib/; a relative DIR is taken from the
  repository root) and the header beside it (DIR/../include/flashcl.h,
  else the repository's include/).
* otherwise, inside the repository checkout (`pip install ./python`):
  configure and build the C library with CMake (needs what
  scripts/setup.sh installs: a C compiler, cmake, OpenCL headers and ICD
  loader, CLBlast) into build/cmake, library only, Release.

The bundled library links to the system's libOpenCL.so.1 and
libclblast.so.1 (Debian: ocl-icd-libopencl1, libclblast1).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 carries bdist_wheel itself
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _bundling():
    return os.environ.get("FLASHCL_BUNDLE", "1") != "0"


def _find_lib(folder: Path):
    # a folder without the development link (a run-time install) still has
    # the versioned names: libflashcl.so.0.MINOR[.PATCH]
    versioned = sorted(folder.glob("libflashcl.so.*"), key=lambda p: len(p.name))
    for path in [folder / "libflashcl.so", *versioned, folder / "libflashcl.dylib"]:
        if path.exists():
            return path.resolve()
    return None


def _cmake_build(build_temp: Path) -> Path:
    if not (REPO / "CMakeLists.txt").is_file() or \
            not (REPO / "include" / "flashcl.h").is_file():
        sys.exit("flashcl: no repository checkout above python/ to build the "
                 "C library from; set FLASHCL_LIBRARY_DIR to a folder with "
                 "libflashcl.so, or FLASHCL_BUNDLE=0 to use an installed one")
    cmake = shutil.which("cmake")
    if not cmake:
        sys.exit("flashcl: cmake not found (run scripts/setup.sh), or set "
                 "FLASHCL_LIBRARY_DIR / FLASHCL_BUNDLE=0")
    out = build_temp / "cmake"
    subprocess.check_call([
        cmake, "-S", str(REPO), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
        "-DFLASHCL_BUILD_TESTS=OFF", "-DFLASHCL_BUILD_BENCH=OFF",
        "-DFLASHCL_BUILD_CLI=OFF"])
    subprocess.check_call([cmake, "--build", str(out), "--target", "flashcl",
                           "-j", str(os.cpu_count() or 2)])
    lib = _find_lib(out)
    if lib is None:
        sys.exit(f"flashcl: the CMake build in {out} made no libflashcl.so")
    return lib


class BuildPy(build_py):
    def run(self):
        super().run()
        if not _bundling():
            return
        given = os.environ.get("FLASHCL_LIBRARY_DIR")
        if given:
            # pip runs this hook inside python/: a relative folder is taken
            # from the repository root (as in FLASHCL_LIBRARY_DIR=build-test)
            if not Path(given).is_absolute():
                given = str(REPO / given)
            lib = _find_lib(Path(given))
            if lib is None:
                sys.exit(f"flashcl: FLASHCL_LIBRARY_DIR={given} has no "
                         f"libflashcl.so")
            headers = [Path(given).parent / "include" / "flashcl.h",
                       REPO / "include" / "flashcl.h"]
        else:
            lib = _cmake_build(HERE / "build")
            headers = [REPO / "include" / "flashcl.h"]
        dest = Path(self.build_lib) / "flashcl" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib, dest / "libflashcl.so")
        for header in headers:
            if header.is_file():
                shutil.copyfile(header, dest / "flashcl.h")
                break
        print(f"flashcl: bundled {lib} into the package")


class BdistWheel(bdist_wheel):
    """A wheel with the bundled .so is platform-specific but Python-version
    independent (ctypes, no extension module): py3-none-<platform>."""

    def finalize_options(self):
        super().finalize_options()
        if _bundling():
            self.root_is_pure = False

    def get_tag(self):
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if _bundling() else (python, abi, plat)


setup(cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
