# Offline model of the wgmma kernel's K/V tile layout (cl/nvidia/flash_fwd_wgmma.cl,
# WG_LOAD_TILE) against the canonical no-swizzle wgmma layouts its
# descriptors name (K: K-major, V: MN-major with the transpose flag), as
# CUTLASS's make_gmma_desc documents them. Run: python3 scripts/wgmma_layout_model.py
# Model of flash_fwd_wgmma.cl's tile layout against the wgmma canonical
# no-swizzle layouts (CUTLASS make_gmma_desc comments, in bytes):
#  K-major: (n,k) at start + (n%8)*16 + (n//8)*SBO + (k//8)*LBO + (k%8)*2
#  MN-major: (k,n) at start + (k%8)*16 + (k//8)*LBO + (n//8)*SBO + (n%8)*2
for D, BN, THREADS in [(d, bn, t) for d in (64, 128, 256) for bn in (32, 64, 128)
                       for t in (128, 256)]:
    CPR = D // 8
    GROUPB = CPR * 128
    smem = {}
    for tid in range(THREADS):
        for ci in range(BN * CPR // THREADS):
            l = tid + ci * THREADS
            r = (l // (8 * CPR)) * 8 + (l & 7)
            c = (l >> 3) % CPR
            for e in range(8):
                a = l * 16 + e * 2
                assert a not in smem
                smem[a] = (r, c * 8 + e)
    assert len(smem) == BN * D
    # S = Q K^T: B(k, n) = K[n][16c + k], n < 64, k < 16
    for c in range(D // 16):
        start, lbo, sbo = c * 256, 128, GROUPB
        for n in range(BN):
            for k in range(16):
                a = start + (n % 8) * 16 + (n // 8) * sbo + (k // 8) * lbo + (k % 8) * 2
                assert smem[a] == (n, 16 * c + k), (D, c, n, k, smem[a])
    # O += P V: B(k, n) = V[16kk + k][n], n < D
    for kk in range(BN // 16):
        start, lbo, sbo = kk * 2 * GROUPB, GROUPB, 128
        for k in range(16):
            for n in range(D):
                a = start + (k % 8) * 16 + (k // 8) * lbo + (n // 8) * sbo + (n % 8) * 2
                assert smem[a] == (16 * kk + k, n), (D, kk, k, n, smem[a])
    print("D", D, "BN", BN, "threads", THREADS, "layout consistent with the descriptors")

# The 128-byte swizzle (the kernel's tile layout,
# cl/nvidia/wgmma/wgmma_producer.clh): per 64 head-dim columns a region of BN rows x 128
# bytes in atoms of 8 rows; chunk c of row r stored at chunk c ^ (r % 8).
# The hardware forms the unswizzled address from the descriptor (CUTLASS's
# canonical layouts: K-major ((8,m),(T,2k)):((8T,SBO),(1,T)), MN-major
# ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 elements) and XORs address
# bits 4-6 with bits 7-9 (Swizzle<3,4,3>); atoms start 1024-byte aligned.
def swizzle128(a):
    return a ^ (((a >> 7) & 7) << 4)


def chunk(t, ci, loaders, rows):
    """WG_CHUNK (swizzled) as the kernel writes it: chunk ci of thread t."""
    per = 8 * rows // loaders
    kb, rs = ci // per, ci % per
    tr, tc = t >> 3, t & 7
    r = tr + rs * (loaders // 8)
    at = (kb * rows * 128 + rs * (loaders // 64) * 1024 +
          (tr >> 3) * 1024 + (tr & 7) * 128 + ((tc ^ (tr & 7)) << 4))
    return r, kb * 8 + tc, at


for D, BN in [(d, bn) for d in (64, 128, 256) for bn in (32, 64, 128)]:
    CPR, REG = D // 8, BN * 128
    smem = {}
    for l in range(BN * CPR):  # the copy of WG_LOAD_TILE (swizzled)
        kb, r, c8 = l // (8 * BN), (l >> 3) % BN, l & 7
        a = kb * REG + (r // 8) * 1024 + (r % 8) * 128 + ((c8 ^ (r % 8)) * 16)
        # the kernel's form: thread t = l % loaders, its chunk ci = l // loaders
        for loaders in (128, 256):
            if (BN * CPR) % loaders == 0:
                assert chunk(l % loaders, l // loaders, loaders, BN) == \
                    (r, kb * 8 + c8, a), (D, BN, loaders, l)
        for e in range(8):
            assert a + 2 * e not in smem
            smem[a + 2 * e] = (r, (kb * 8 + c8) * 8 + e)
    assert len(smem) == BN * D
    for c in range(D // 16):  # WG_K_DESC: K-major, SBO 1024
        start = (c // 4) * REG + (c % 4) * 32
        for n in range(BN):
            for k in range(16):
                a = swizzle128(start + (n % 8) * 128 + (n // 8) * 1024 + k * 2)
                assert smem[a] == (n, 16 * c + k), (D, BN, c, n, k, smem.get(a))
    for kk in range(BN // 16):  # WG_V_DESC: MN-major, LBO the region, SBO 1024
        start = kk * 2048
        for k in range(16):
            for n in range(D):
                a = swizzle128(start + (n % 64) * 2 + (n // 64) * REG +
                               (k % 8) * 128 + (k // 8) * 1024)
                assert smem[a] == (16 * kk + k, n), (D, BN, kk, k, n, smem.get(a))
    print("D", D, "BN", BN, "128-byte swizzle consistent with the descriptors")
