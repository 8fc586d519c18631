#!/usr/bin/env python3
"""Model of the wgmma kernel's staged bias and mask (FLASHCL_NV_WGMMA_XSTAGE,
cl/nvidia/flash_fwd_wgmma.cl: WG_XS_COPY_ROWS, WG_XS_BIAS_AT, WG_XS_MASK_AT;
src/paths/nv_wgmma.c: plan_xstage).

For every tile geometry the host can plan, the producer's 128 threads'
16-byte copies must cover each staged row's chunks exactly once inside the
slot, and every element a consumer thread reads (rows g and g + 8 of its
warp, keys 8n + 2t4 and + 1) must be the byte the copy put there. Reports
the shared-memory wavefronts of each consumer read against the minimum the
read's bytes need. Exits non-zero on a mismatch.
"""
import sys


def geometry(xb, xm, bn, d, bm):
    """The kernel's WG_XROWS / WG_XPARTS, or None where the host does not
    stage (plan_xstage's rules)."""
    slot = bn * d * 2
    fit = slot // (bn * (xb + xm))
    rows = 128 if fit >= 128 else 64 if fit >= 64 else 32 if fit >= 32 else 16
    rows = min(rows, bm)
    cb, cm = bn * xb // 16, bn * xm // 16
    if fit < 16 or bm % rows:
        return None
    if cb and (128 % cb or rows * cb % 128):
        return None
    if cm and (128 % cm or rows * cm % 128):
        return None
    return rows, bm // rows, slot


def swz_b(xb, r):
    return (r & 7) << 1 if xb == 4 else r & 7


def swz_m(bn, r):
    return r & 7 if bn >= 128 else (r >> 1) & 3


def copies(xb, xm, bn, rows):
    """(byte offset in the slot, region, row, first key byte) of each chunk
    the producer writes, as WG_XS_COPY_ROWS computes them."""
    out = []
    regions = []
    if xb:
        regions.append(("bias", 0, bn * xb, bn * xb // 16, xb,
                        lambda r: swz_b(xb, r)))
    if xm:
        regions.append(("mask", rows * bn * xb, bn, bn // 16, 1,
                        lambda r: swz_m(bn, r)))
    for name, at0, row_bytes, cpr, esz, swz in regions:
        for tid in range(128):
            c, r0 = tid % cpr, tid // cpr
            for ci in range(rows * cpr // 128):
                step = ci * (128 // cpr)
                r = r0 + step
                at = at0 + r0 * row_bytes + step * row_bytes + ((c ^ swz(r)) << 4)
                out.append((at, name, r, c * 16))
    return out


def check(xb, xm, bn, d, bm):
    g = geometry(xb, xm, bn, d, bm)
    if g is None:
        return True, "not staged"
    rows, parts, slot = g
    byte_of = {}
    ok = True
    for at, name, r, kbyte in copies(xb, xm, bn, rows):
        if at % 16 or at + 16 > slot:
            print(f"  chunk outside the slot: {name} row {r} at {at}")
            ok = False
        for i in range(16):
            if at + i in byte_of:
                print(f"  byte {at + i} written twice")
                ok = False
            byte_of[at + i] = (name, r, kbyte + i)
    want = rows * bn * (xb + xm)
    if len(byte_of) != want:
        print(f"  {len(byte_of)} bytes copied, {want} staged")
        ok = False
    worst = 0
    for warp in range(bm // 16):
        part, x_r = warp * 16 // rows, warp * 16 % rows
        for n in range(bn // 8):
            for name, esz, reads in (("bias", xb, 2 * xb), ("mask", xm, 2)):
                if not esz:
                    continue
                banks = {}
                for lane in range(32):
                    gq, t4 = lane >> 2, lane & 3
                    for hh in range(2):
                        r = x_r + gq + hh * 8
                        col = n * 8 + t4 * 2
                        if name == "bias":
                            at = (r * bn * xb + (((col * xb) >> 4) ^ swz_b(xb, r)) * 16
                                  + ((col * xb) & 15))
                        else:
                            at = (rows * bn * xb + r * bn + (((col >> 4) ^ swz_m(bn, r)) * 16)
                                  + (col & 15))
                        for i in range(reads):
                            got = byte_of.get(at + i)
                            if got != (name, r, col * esz + i):
                                print(f"  {name} warp {warp} lane {lane} row {r} key {col}:"
                                      f" byte {at + i} holds {got}")
                                ok = False
                        if hh == 0:  # one read instruction per row half
                            words = {(at + i) // 4 for i in range(reads)}
                            for w in words:
                                banks.setdefault(w % 32, set()).add(w)
                wavefronts = max(len(s) for s in banks.values())
                need = max(1, 32 * reads // 128)
                worst = max(worst, wavefronts / need)
    return ok, f"{rows} rows x {parts} parts, worst read {worst:.0f}x its minimum wavefronts"


def main():
    ok = True
    for d in (64, 128, 256):
        for bn in (64, 128):
            for bm in (64, 128):
                for xb in (0, 2, 4):
                    for xm in (0, 1):
                        if not xb and not xm:
                            continue
                        good, what = check(xb, xm, bn, d, bm)
                        print(f"D {d} BN {bn} BM {bm} bias {xb} B mask {xm}: "
                              f"{'ok' if good else 'FAIL'} ({what})")
                        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
