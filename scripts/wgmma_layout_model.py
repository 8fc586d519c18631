# Offline model of the wgmma kernel's K/V tile layout (cl/nvidia/flash_fwd_wgmma.cl,
# WG_LOAD_TILE) against the canonical no-swizzle wgmma layouts its
# descriptors name (K: K-major, V: MN-major with the transpose flag), as
# CUTLASS's make_gmma_desc documents them. Run: python3 scripts/wgmma_layout_model.py
# Model of flash_fwd_wgmma.cl's tile layout against the wgmma canonical
# no-swizzle layouts (CUTLASS make_gmma_desc comments, in bytes):
#  K-major: (n,k) at start + (n%8)*16 + (n//8)*SBO + (k//8)*LBO + (k%8)*2
#  MN-major: (k,n) at start + (k%8)*16 + (k//8)*LBO + (n//8)*SBO + (n%8)*2
for D, BN, THREADS in [(d, bn, t) for d in (64, 128) for bn in (32, 64, 128)
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
