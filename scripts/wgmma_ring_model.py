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


def replay_sahead(R, j_end):
    """FLASHCL_NV_WGMMA_SAHEAD: tiles in the order of use K_0, K_1, V_0,
    K_2, V_1, ... (u = 2j + 1: K_{j+1}, a hole at j + 1 = j_end; u = 2j + 2:
    V_j), LAG 1 refills; S_{j+1} issued before the softmax of tile j."""
    L = 1
    n_seq = 2 * j_end + 1 if j_end else 0
    real = lambda u: u < n_seq and u != n_seq - 2
    groups, landed, slot, used = [], set(), {}, set()
    inflight = []  # committed wgmma groups, oldest first: list of tiles read

    def load(u):
        if real(u):
            old = slot.get(u % R)
            assert old is None or all(old not in g for g in inflight), (R, j_end, u, old)
            assert old is None or old in used, ("overwrote unused", R, j_end, u, old)
            slot[u % R] = u
        groups.append(u if real(u) else None)

    def cp_wait(n):
        for u in (groups[:len(groups) - n] if n else groups):
            if u is not None:
                landed.add(u)

    def step(u):
        cp_wait(R - 2 - L)
        load(u + R - 1 - L)

    def issue(u):
        assert u in landed and slot[u % R] == u, (R, j_end, u)
        used.add(u)
        inflight.append({u})

    def wg_wait(n):
        del inflight[:len(inflight) - n if n else len(inflight)]

    for u in range(R - 1 - L):
        load(u)
    if j_end:
        step(0); issue(0); wg_wait(0)
    for j in range(j_end):
        more = j + 1 < j_end
        step(2 * j + 1)
        if more:
            issue(2 * j + 1); wg_wait(1)
        else:
            wg_wait(0)
        # softmax of tile j: its S (tile 0 or 2j - 1) and P V_{j-1} done
        s_j = 0 if j == 0 else 2 * j - 1
        assert all(s_j not in g and 2 * j not in g for g in inflight), (R, j_end, j)
        step(2 * j + 2)
        issue(2 * j + 2)
        wg_wait(1 if more else 0)
    assert not inflight
    assert used == {u for u in range(n_seq) if real(u)}, (R, j_end, used)


count = 0
for R in range(3, 9):
    for j_end in range(0, 12):
        replay_sahead(R, j_end)
        count += 1
print(f"ring model, S ahead: {count} schedules (R 3..8, 0..11 key tiles) OK")

count = 0
for R in range(2, 9):
    for L in (0, 1):
        if R < 2 + L:
            continue
        for j_end in range(0, 12):
            replay(R, L, j_end)
            count += 1
print(f"ring model: {count} schedules (R 2..8, LAG 0/1, 0..11 key tiles) OK")
