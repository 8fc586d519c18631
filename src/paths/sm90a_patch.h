/* The PTX patch of the Hopper wgmma path (cl/nvidia/nv_wgmma.clh): NVIDIA's
 * OpenCL compiler emits `.target sm_90` and rejects sm_90a instructions,
 * so the kernel writes them inside PTX comments marked SM90A; this turns
 * the PTX it produced into the PTX to build with clCreateProgramWithBinary.
 * It relies only on the markers and on the .target (and .version)
 * directives, never on register or symbol names, which differ between
 * compilers. Pure text, no OpenCL: tests/test_sm90a_patch.c and
 * tools/sm90a_patch (offline checks with clang's PTX and ptxas) use it
 * alone. */
#ifndef FLASHCL_SM90A_PATCH_H
#define FLASHCL_SM90A_PATCH_H

#include <stddef.h>

/* The disk-cache kind of patched binaries: a new patch (other output for
 * the same PTX) takes a new kind, so no binary patched the old way is
 * loaded. */
#define SM90A_PATCH_KIND "sm90a1"

/* The patched text of `ptx` (`size` bytes; a trailing NUL, as drivers
 * return with CL_PROGRAM_BINARIES, is allowed): every `/` `*` `SM90A ... *`
 * `/` comment replaced by its contents, `.target sm_90` by `.target
 * sm_90a` (other targets in the list kept), a `.version` below 8.0 raised
 * to 8.0 (wgmma's minimum). Returns a NUL-terminated malloc'd copy and its
 * length without the NUL in *out_size; a comment `SM90A_MAXNREG n` in the
 * kernel body adds `.maxnreg n` to its .entry (NULL unless 24 <= n <= 255); with the number of uncommented
 * instructions in *markers (either may be NULL); NULL with the reason in
 * `why` when the text is no PTX it can patch (no or another .target, no
 * marker, a marker comment without its end, a marker inside a marker, out
 * of memory). */
char *sm90a_patch_ptx(const char *ptx, size_t size, size_t *out_size,
                      int *markers, char *why, size_t why_cap);

/* A copy of `ptx` whose one `.shared ... .b8 name[n]` declaration has
 * `bytes` instead of n (the wgmma path's experiment with more local memory
 * than the driver's compiler accepts in source); NULL with the reason
 * unless exactly one such declaration is there. */
char *sm90a_set_shared_bytes(const char *ptx, size_t size, size_t bytes,
                             size_t *out_size, char *why, size_t why_cap);

/* The bytes of local memory the kernel's tiles were sized for, from its
 * comment `SM90A_SHARED_BYTES n` (the wgmma kernel leaves it when that is
 * more than its source could declare); 0 without the comment or when n is
 * outside 49153 .. 232448 (above the 48 KiB OpenCL C may declare, within
 * an H100/H200 SM's 227 KiB). */
size_t sm90a_shared_marker(const char *ptx, size_t size);

#endif /* FLASHCL_SM90A_PATCH_H */
