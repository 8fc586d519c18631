"""The ctypes mirror against the C header: every struct offset and size,
every enum value, compiled with the system C compiler."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

import flashcl
from flashcl import _lib

PKG = Path(flashcl.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[2]


def header_dir():
    """The header the loaded library was built from: the copy bundled with
    it, else the repository's include/."""
    for folder in (PKG / "_lib", REPO / "include"):
        if (folder / "flashcl.h").is_file():
            return folder
    pytest.fail("flashcl.h not found (neither bundled nor in the repository)")


STRUCTS = {"flashcl_tensor": _lib.Tensor,
           "flashcl_attention_desc": _lib.AttentionDesc,
           "flashcl_combine_desc": _lib.CombineDesc,
           "flashcl_backward_desc": _lib.BackwardDesc,
           "flashcl_device_info": _lib.DeviceInfo}

ENUMS = {
    "FLASHCL_DTYPE_FP32": _lib.DTYPE_FP32, "FLASHCL_DTYPE_FP16": _lib.DTYPE_FP16,
    "FLASHCL_DTYPE_BF16": _lib.DTYPE_BF16, "FLASHCL_DTYPE_FP64": _lib.DTYPE_FP64,
    "FLASHCL_LAYOUT_BNHD": _lib.LAYOUT_BNHD, "FLASHCL_LAYOUT_BHND": _lib.LAYOUT_BHND,
    "FLASHCL_CAUSAL_BOTTOM_RIGHT": _lib.CAUSAL_BOTTOM_RIGHT,
    "FLASHCL_CAUSAL_TOP_LEFT": _lib.CAUSAL_TOP_LEFT,
    "FLASHCL_BACKEND_AUTO": _lib.BACKEND_AUTO,
    "FLASHCL_BACKEND_FUSED": _lib.BACKEND_FUSED,
    "FLASHCL_BACKEND_REFERENCE": _lib.BACKEND_REFERENCE,
    "FLASHCL_KV_SAME": _lib.KV_SAME, "FLASHCL_KV_FP8_E4M3": _lib.KV_FP8_E4M3,
    "FLASHCL_KV_FP8_E5M2": _lib.KV_FP8_E5M2, "FLASHCL_KV_INT8": _lib.KV_INT8,
    "FLASHCL_KV_INT4": _lib.KV_INT4,
    "FLASHCL_STATUS_COUNT_": len(flashcl.Status),
    "FLASHCL_INFER_STATUS_APPENDS_DROPPED": _lib.INFER_STATUS_APPENDS_DROPPED,
    "FLASHCL_INFER_STATUS_PAGES_SKIPPED": _lib.INFER_STATUS_PAGES_SKIPPED,
    "FLASHCL_INFER_STATUS_LENGTHS_CLAMPED": _lib.INFER_STATUS_LENGTHS_CLAMPED,
    "FLASHCL_INFER_STATUS_ROWS_SKIPPED": _lib.INFER_STATUS_ROWS_SKIPPED,
    "FLASHCL_INFER_STATUS_COUNT": _lib.INFER_STATUS_COUNT,
}
for status in flashcl.Status:
    ENUMS["FLASHCL_SUCCESS" if status == 0 else f"FLASHCL_ERROR_{status.name}"] = int(status)


@pytest.fixture(scope="module")
def c_values(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler to check the ctypes layout against the header"
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include <flashcl.h>',
             'int main(void) {']
    for cname, struct in STRUCTS.items():
        lines.append(f'printf("sizeof {cname} %zu\\n", sizeof({cname}));')
        for field, _ in struct._fields_:
            lines.append(f'printf("offsetof {cname}.{field} %zu\\n", '
                         f'offsetof({cname}, {field}));')
    for name in ENUMS:
        lines.append(f'printf("enum {name} %d\\n", (int){name});')
    for name in ("FLASHCL_VERSION_NUMBER",):
        lines.append(f'printf("macro {name} %d\\n", (int){name});')
    lines.append('printf("macro FLASHCL_MAX_SCALE %.9g\\n", (double)FLASHCL_MAX_SCALE);')
    lines.append('printf("macro FLASHCL_MIN_SOFTCAP %.9g\\n", (double)FLASHCL_MIN_SOFTCAP);')
    lines.append("return 0; }")
    tmp = tmp_path_factory.mktemp("abi")
    src, exe = tmp / "abi.c", tmp / "abi"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{header_dir()}",
                    str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True,
                         text=True).stdout
    return {" ".join(line.split()[:2]): line.split()[2]
            for line in out.splitlines()}


@pytest.mark.parametrize("cname", sorted(STRUCTS))
def test_struct_layout(c_values, cname):
    struct = STRUCTS[cname]
    assert ctypes.sizeof(struct) == int(c_values[f"sizeof {cname}"])
    for field, _ in struct._fields_:
        got = getattr(struct, field).offset
        assert got == int(c_values[f"offsetof {cname}.{field}"]), field


def test_descriptor_ends(c_values):
    fields = [f for f, _ in _lib.AttentionDesc._fields_]
    assert fields[0] == "struct_size" and fields[-1] == "lse_dtype"
    fields = [f for f, _ in _lib.BackwardDesc._fields_]
    assert fields[0] == "struct_size" and fields[-1] == "nondeterministic"


def test_enums(c_values):
    for name, value in ENUMS.items():
        assert int(c_values[f"enum {name}"]) == value, name


def test_version_and_limits(c_values):
    assert int(c_values["macro FLASHCL_VERSION_NUMBER"]) == _lib.version_number()
    assert float(c_values["macro FLASHCL_MAX_SCALE"]) == pytest.approx(_lib.MAX_SCALE, rel=1e-6)
    assert float(c_values["macro FLASHCL_MIN_SOFTCAP"]) == pytest.approx(_lib.MIN_SOFTCAP, rel=1e-6)


def test_status_names_and_classes():
    for status in flashcl.Status:
        if status == 0:
            continue
        err = flashcl._errors.error_for(int(status), "detail")
        assert isinstance(err, flashcl.Error) and err.status == status
        assert type(err).status == status
        name = _lib.decode(_lib.status_string(int(status)))
        assert str(err) == f"{name}: detail"
    assert len({cls.status for cls in flashcl.ERROR_CLASSES}) == len(flashcl.Status) - 1


def test_library_found():
    """FLASHCL_TEST_EXPECT_LIBRARY (set by scripts/test.sh): the package
    runs that library (a bundled copy of it), not another one."""
    import os
    assert Path(flashcl.library_path).exists()
    expect = os.environ.get("FLASHCL_TEST_EXPECT_LIBRARY")
    if expect:
        assert Path(flashcl.library_path).read_bytes() == \
            Path(expect).resolve().read_bytes(), (flashcl.library_path, expect)
    assert flashcl.library_source
    assert flashcl.library_version() == _lib.decode(_lib.version_string())


def _import_with(env_value):
    import os
    import sys
    env = dict(os.environ, FLASHCL_LIBRARY=env_value)
    return subprocess.run(
        [sys.executable, "-c",
         "import flashcl; print(flashcl.library_source, flashcl.library_path)"],
        env=env, capture_output=True, text=True)


def test_flashcl_library_variable_comes_first():
    """FLASHCL_LIBRARY (a file or its folder) wins over the bundled copy."""
    path = Path(flashcl.library_path)
    for value in (str(path), str(path.parent)):
        run = _import_with(value)
        assert run.returncode == 0, run.stderr
        source, found = run.stdout.split()
        assert source == "FLASHCL_LIBRARY"
        assert Path(found).resolve() == path.resolve()


def test_flashcl_library_variable_must_load():
    run = _import_with("/nonexistent/libflashcl.so")
    assert run.returncode != 0
    assert "ImportError" in run.stderr and "FLASHCL_LIBRARY=/nonexistent" in run.stderr
