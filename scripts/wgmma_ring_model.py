# Offline model of the ring schedule of cl/nvidia/flash_fwd_wgmma.cl
# (FLASHCL_NV_WGMMA_RING = R slots, FLASHCL_NV_WGMMA_LAG = L): replays the
# loop's order of cp.async commits and waits, barriers, wgmma issues and
# waits for every R, L and tile count, and checks that
#  - a tile's cp.async group is complete when its step starts using it
#    (cp.async.wait_group R - 2 - L leaves only that many newer groups),
#  - a slot is refilled only after every wgmma reading its old tile was
#    waited for before the barrier that precedes the refill,
#  - a tile is still in its slot when used, and the slot address is its own.
# Run: python3 scripts/wgmma_ring_model.py
def replay(R, L, j_end):
    n_tiles = 2 * j_end
    groups = []          # tile of each committed cp.async group (None: empty)
    landed = set()       # tiles whose group completed
    slot = {}            # slot -> tile held
    reading = {}         # tile -> True while a wgmma reading it is not waited for
    log = []

    def load(t):
        if t < n_tiles:
            s = t % R
            old = slot.get(s)
            assert old is None or not reading.get(old), (R, L, j_end, t, old)
            assert old is None or old in used, ("overwrote unused", R, L, t, old)
            slot[s] = t
        groups.append(t if t < n_tiles else None)

    def cp_wait(n):      # all but the n newest groups complete
        for t in groups[:len(groups) - n] if n else groups:
            if t is not None:
                landed.add(t)

    used = set()
    pending = []         # tiles read by wgmma not yet waited for

    def wg_wait0():
        for t in pending:
            reading[t] = False
        pending.clear()

    def step(t):
        cp_wait(R - 2 - L)
        # barrier: every thread is past its wgmma waits so far (single
        # thread model: `reading` is the state of all of them)
        load(t + R - 1 - L)

    def use(t):
        assert t in landed, ("not landed", R, L, j_end, t)
        assert slot[t % R] == t, ("evicted", R, L, j_end, t)
        used.add(t)
        reading[t] = True
        pending.append(t)

    for t in range(R - 1 - L):
        load(t)
    for j in range(j_end):
        step(2 * j)
        use(2 * j)          # S = Q K_j^T
        wg_wait0()          # (with L = 1 also the P V of tile j - 1)
        step(2 * j + 1)
        use(2 * j + 1)      # O += P V_j
        if not L or j + 1 == j_end:
            wg_wait0()
    assert not pending
    assert used == set(range(n_tiles))
    return True


count = 0
for R in range(2, 9):
    for L in (0, 1):
        if R < 2 + L:
            continue
        for j_end in range(0, 12):
            replay(R, L, j_end)
            count += 1
print(f"ring model: {count} schedules (R 2..8, LAG 0/1, 0..11 key tiles) OK")
