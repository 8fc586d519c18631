#!/usr/bin/env bash
# Intel's OpenCL CPU runtime, a second OpenCL implementation next to PoCL,
# from PyPI into .intel-ocl/ (git-ignored), with nothing installed
# system-wide. Downloads the pinned wheels with pip (once: reused when
# there), unpacks their lib/ folders into .intel-ocl/lib/ (without the
# wheel's own libOpenCL.so* ICD loader, which would shadow the system's
# ocl-icd loader and needs libsvml at load time), writes the ICD files, and
# prints on stdout the environment to use, as shell lines:
#
#   eval "$(scripts/intel_cpu_runtime.sh)"        # Intel's platform only
#   eval "$(scripts/intel_cpu_runtime.sh --all)"  # Intel's and the system's
#
#   OCL_ICD_VENDORS  .intel-ocl/vendors/: only intel.icd (default), so that
#                    every device a test opens, the default one included,
#                    is Intel's and nothing can fall back to PoCL; with
#                    --all .intel-ocl/vendors-all/: intel.icd and links to
#                    every /etc/OpenCL/vendors/*.icd (PoCL), both platforms
#                    in one process (ocl-icd reads one folder, not a list).
#   LD_LIBRARY_PATH  .intel-ocl/lib/ (the runtime's libraries and those of
#                    intel-cmplr-lib-rt and tbb) before the caller's value.
#   FLASHCL_DEVICE   "intel" (a substring of the platform name
#                    "Intel(R) OpenCL"), so flashcl fails instead of using
#                    another device when Intel's is missing.
#
# Progress goes to stderr. Fails (non-zero) when a wheel cannot be had.
# Measured facts: /work/shared/notes/intel-opencl-cpu.md (when there).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.intel-ocl
wheels=(intel-opencl-rt==2026.2.0 intel-cmplr-lib-rt==2026.2.0
        intel-cmplr-lic-rt==2026.2.0 tbb==2023.2.0)
mode=intel
case "${1:-}" in
  "") ;;
  --all) mode=all ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac
say() { echo "intel_cpu_runtime: $*" >&2; }

stamp="$root/ready"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${wheels[*]}" ] \
   || [ ! -e "$root/lib/libintelocl.so" ]; then
  start=$SECONDS
  mkdir -p "$root/wheels"
  # pip: python3's own, else a venv's (Debian ships pip and venv apart
  # from python3; a download needs no install rights either way).
  pip=(python3 -m pip)
  if ! python3 -m pip --version >/dev/null 2>&1; then
    scripts/setup.sh --test >&2 # python3-venv; a no-op when there
    [ -x "$root/venv/bin/python" ] || python3 -m venv "$root/venv"
    pip=("$root/venv/bin/python" -m pip)
  fi
  # pip download skips a wheel already in the folder.
  say "pip download ${wheels[*]}"
  "${pip[@]}" download -q --disable-pip-version-check --no-deps \
    -d "$root/wheels" "${wheels[@]}" >&2
  rm -rf "$root/lib" "$stamp"
  # Unpack <name>.data/data/lib/* of each wheel (a zip file) flat into
  # lib/, except libOpenCL*. The wheels hold a soname chain (libfoo.so,
  # .so.N, .so.N.M) as copies of one file: the first copy is written, the
  # others become links to it (saves about 400 MB).
  python3 - "$root/wheels" "$root/lib" "${wheels[@]}" <<'EOF'
import os, sys, zipfile, glob, shutil
wheel_dir, lib, pins = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(lib)
for pin in pins:
    name, version = pin.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = glob.glob(os.path.join(wheel_dir, pattern))
    if len(found) != 1:
        sys.exit(f"intel_cpu_runtime: expected one {pattern} in {wheel_dir}, found {found}")
    with zipfile.ZipFile(found[0]) as z:
        written = {}  # (size, crc) -> file name in lib
        members = [m for m in z.infolist()
                   if "/data/lib/" in m.filename and not m.is_dir()]
        # the longest name of a chain (the versioned file) is the real one
        for m in sorted(members, key=lambda m: -len(m.filename)):
            base = os.path.basename(m.filename)
            if base.startswith("libOpenCL"):
                continue
            if not os.path.dirname(m.filename).endswith("/data/lib"):
                sys.exit(f"intel_cpu_runtime: unexpected subfolder {m.filename}")
            dest = os.path.join(lib, base)
            if os.path.lexists(dest):
                sys.exit(f"intel_cpu_runtime: {base} is in two wheels")
            key = (m.file_size, m.CRC)
            if key in written:
                os.symlink(written[key], dest)
                continue
            with z.open(m) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            written[key] = base
EOF
  echo "${wheels[*]}" >"$stamp"
  say "unpacked into $root/lib in $((SECONDS - start)) s"
fi

# ICD files (cheap, written every time: the absolute path follows the
# checkout).
mkdir -p "$root/vendors" "$root/vendors-all"
echo "$root/lib/libintelocl.so" >"$root/vendors/intel.icd"
find "$root/vendors-all" -mindepth 1 -delete
cp "$root/vendors/intel.icd" "$root/vendors-all/intel.icd"
for icd in /etc/OpenCL/vendors/*.icd; do
  [ -e "$icd" ] && ln -s "$icd" "$root/vendors-all/$(basename "$icd")"
done

vendors=$root/vendors
[ "$mode" = all ] && vendors=$root/vendors-all
printf 'export OCL_ICD_VENDORS=%q\n' "$vendors"
printf 'export LD_LIBRARY_PATH=%q\n' "$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
printf 'export FLASHCL_DEVICE=intel\n'
