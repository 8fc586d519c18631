#!/usr/bin/env python3
"""The wgmma kernel's key range and edge tests, checked against the band
by brute force (no GPU: the kernel runs only on an H200).

cl/nvidia/flash_fwd_wgmma.cl decides per work item which key tiles it
loads (wg_item_of: key_base, j_end; per consumer warpgroup j_first and j_own) and which
of them run the mask code (WG_EDGE, from free_hi and free_lo); inside an
edge tile it hides key col of row `row` when col > WG_ROW_HI(row) or
col < WG_ROW_LO(row). The formulas are
transcribed below, each with the kernel's name, and every (row, key) of
small problems is checked:

  - every key a row sees lies in a tile its warpgroup computes;
  - a tile that skips the mask code shows only keys every row of the
    warpgroup sees (and that exist);
  - in an edge tile the mask hides exactly the keys the row must not see.

Semantics (README, docs/kernel-abi.md): row i sees key j iff
j < seqlen_k and (left < 0 or j >= i + diag - left) and (right < 0 or
j <= i + diag + right). The host sets FLASHCL_CAUSAL iff right >= 0.

    python3 scripts/wgmma_band_model.py      # exit status 1 on a mismatch
"""
import itertools
import sys


def cdiv(a, b):
    """C's (a + b - 1) / b for a >= 0 (the kernel's tile counts)."""
    return (a + b - 1) // b


def clamp(x, lo, hi):
    return max(lo, min(x, hi))


def kernel_ranges(m0, nq, nk_all, diag, left, right, bm, bn, ws, wg):
    """The kernel's locals for consumer warpgroup wg of the block at m0."""
    causal = right >= 0
    mlast = min(m0 + bm, nq)
    n_stop = clamp(mlast - 1 + diag + right + 1, 0, nk_all) if causal else nk_all
    key_base = clamp(m0 + diag - left, 0, n_stop) // bn * bn if left >= 0 else 0
    nk = nk_all - key_base
    kdiag = diag - key_base
    n_end = n_stop - key_base
    j_end = cdiv(n_end, bn)
    m0_own = m0 + wg * 64 if ws else m0
    if causal and ws:
        n_end_own = clamp(min(m0_own + 64, nq) - 1 + kdiag + right + 1, 0, nk)
        j_own = cdiv(n_end_own, bn)
    else:
        j_own = j_end
    if left >= 0 and causal and ws:  # FLASHCL_WINDOW_LEFT && FLASHCL_CAUSAL && WG_WS
        j_first = min(max(m0_own + kdiag - left, 0) // bn, j_own)
        mlast_own = min(m0_own + 64, mlast)
    else:
        j_first = 0
        mlast_own = mlast
    free_hi = m0_own + kdiag + right
    free_lo = mlast_own - 1 + kdiag - left

    def edge(n0):
        e = n0 + bn > nk
        if causal:
            e = e or n0 + bn - 1 > free_hi
        if left >= 0:
            e = e or n0 < free_lo
        return e

    def hidden(row, col):
        hi = min(row + kdiag + right, nk - 1) if causal else nk - 1
        lo = row + kdiag - left if left >= 0 else 0
        return col > hi or (left >= 0 and col < lo)

    return key_base, j_end, j_own, j_first, edge, hidden


def sees(row, key, nk_all, diag, left, right):
    return (key < nk_all and (left < 0 or key >= row + diag - left) and
            (right < 0 or key <= row + diag + right))


def check(nq, nk_all, diag, left, right, bm, bn, ws):
    bad = []
    for m0 in range(0, nq, bm):
        for wg in range(bm // 64 if ws else 1):
            key_base, j_end, j_own, j_first, edge, hidden = kernel_ranges(
                m0, nq, nk_all, diag, left, right, bm, bn, ws, wg)
            assert 0 <= j_first <= j_own <= j_end and key_base % bn == 0
            rows = range(m0 + wg * 64, min(m0 + wg * 64 + 64, nq)) if ws \
                else range(m0, min(m0 + bm, nq))
            first, stop = key_base + j_first * bn, key_base + j_own * bn
            for row in rows:
                for key in range(nk_all):
                    if sees(row, key, nk_all, diag, left, right) and \
                            not first <= key < stop:
                        bad.append(("key outside the computed tiles", m0, wg,
                                    row, key))
            for j in range(j_first, j_own):
                n0 = j * bn
                for row in rows:
                    for col in range(n0, n0 + bn):
                        key = key_base + col
                        want = sees(row, key, nk_all, diag, left, right)
                        got = not hidden(row, col) if edge(n0) else True
                        if want != got:
                            bad.append(("mask", m0, wg, row, key, edge(n0)))
    return bad


def main():
    cases = 0
    failures = []
    for bn, bm, ws in ((64, 128, True), (128, 128, True), (128, 192, True),
                       (64, 192, True), (64, 64, False), (64, 128, False)):
        for nq, nk_all in ((1, 1), (7, 200), (130, 70), (193, 203)):
            for top_left in (False, True):
                diag = 0 if top_left else nk_all - nq
                for left, right in itertools.product((-1, 0, 5, 8, 62, 64, 72, 130),
                                                     (-1, 0, 3, 70)):
                    cases += 1
                    bad = check(nq, nk_all, diag, left, right, bm, bn, ws)
                    if bad:
                        failures.append(((bn, bm, ws, nq, nk_all, diag, left,
                                          right), bad[:3]))
    for case, bad in failures:
        print("FAIL", case, bad)
    print(f"wgmma band model: {cases} cases, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
