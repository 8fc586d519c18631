"""python -m flashcl: the library in use and every device (as flashcl info)."""
import flashcl

print(f"flashcl {flashcl.__version__} (libflashcl {flashcl.library_version()}"
      f", {flashcl.library_source}: {flashcl.library_path})")
found = flashcl.devices()
if not found:
    print("no OpenCL device")
    raise SystemExit(3)
for dev in found:
    print()
    print(dev)
