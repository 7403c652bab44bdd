"""A CPU model of the tensor-core data paths the matmul generator writes, for checks without a GPU.

Shared memory is a dict byte offset -> 16-bit element. The instructions are modelled from their PTX
definitions: ldmatrix (.x4, .trans), mma.sync m16n8k16 (row.col fragments), the wgmma shared-memory
matrix descriptor (start address, leading / stride byte offsets, 128-byte swizzle) with its canonical
K-major and MN-major layouts and its accumulator fragment layout, and the TMA's 128-byte swizzle of a
box. The kernel-side index formulas (chunk and panel offsets, ldmatrix lane addresses, descriptor
bases per k-step, epilogue positions) are written here as the template writes them; the tests pin
those formulas to the generated text and run the model against kernels known to be correct on an
H200 (the held-out idiom kernel, the gemm ladder's wgmma rung, the fmha ladder's MN-major v).
"""
from __future__ import annotations

import numpy as np


def swizzle128(addr: int) -> int:
    """The 128-byte swizzle on a byte address: its 16-byte chunk bits (4-6) XOR its row-in-atom bits (7-9)."""
    return addr ^ (((addr >> 7) & 7) << 4)


# ---- the generator's shared layouts ------------------------------------------------------------------------

def chunk_offset(r: int, c: int, swizzle: bool) -> int:
    return r * 128 + ((c ^ (r & 7)) if swizzle else c) * 16


def panel_offset(r: int, c: int, swizzle: bool, bk: int = 64) -> int:
    return (c // 8) * (bk * 128) + chunk_offset(r, c % 8, swizzle)


def store_rows(smem: dict, base: int, tile: np.ndarray, offset) -> None:
    """tile[r, 8c + e] at base + offset(r, c) + 2e: a copy of 16-byte chunks (cp.async or vector stores)."""
    rows, cols = tile.shape
    for r in range(rows):
        for c in range(cols // 8):
            o = base + offset(r, c)
            for e in range(8):
                smem[o + 2 * e] = tile[r, 8 * c + e]


def tma_box(smem: dict, dst: int, box: np.ndarray) -> None:
    """A box of 64 columns (128-byte rows) written by the TMA with the 128-byte swizzle at a 1024-aligned dst."""
    rows, cols = box.shape
    assert cols == 64 and dst % 1024 == 0
    for i in range(rows):
        for j in range(cols):
            smem[swizzle128(dst + i * 128 + j * 2)] = box[i, j]


# ---- ldmatrix and mma.sync ---------------------------------------------------------------------------------

def ldmatrix_x4(smem: dict, addrs: list[int], trans: bool) -> list[list[tuple]]:
    """Per lane, four registers of two elements: matrix i's row j is the 8 elements at lane 8i + j's address."""
    mats = [[[smem[addrs[8 * i + j] + 2 * e] for e in range(8)] for j in range(8)] for i in range(4)]
    out = []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        if trans:
            out.append([(mats[i][2 * t][g], mats[i][2 * t + 1][g]) for i in range(4)])
        else:
            out.append([(mats[i][g][2 * t], mats[i][g][2 * t + 1]) for i in range(4)])
    return out


def mma_16816(acc: list, a: list, b: list) -> None:
    """acc[lane] (4 floats) += A (16 x 16 from a[lane], 4 registers) @ B (16 x 8 from b[lane], 2 registers)."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for (r, c), v in zip(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)), a[lane]):
            A[r, c], A[r, c + 1] = v
        for k, v in zip((2 * t, 2 * t + 8), b[lane]):
            B[k, g], B[k + 1, g] = v
    D = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        acc[lane] = [acc[lane][0] + D[g, 2 * t], acc[lane][1] + D[g, 2 * t + 1],
                     acc[lane][2] + D[g + 8, 2 * t], acc[lane][3] + D[g + 8, 2 * t + 1]]


def scatter(acc: dict, out: np.ndarray, wm: int, wn: int, warp_m: int, warp_n: int) -> None:
    """The mma.sync epilogue's positions: out[r, c] += one warp's accumulators (relative to the tile)."""
    for (mi, ni), regs in acc.items():
        for lane in range(32):
            r = wm * warp_m + mi * 16 + lane // 4
            c = wn * warp_n + ni * 8 + (lane % 4) * 2
            out[r, c] += regs[lane][0]
            out[r, c + 1] += regs[lane][1]
            out[r + 8, c] += regs[lane][2]
            out[r + 8, c + 1] += regs[lane][3]


def mma_block(smem: dict, sa: int, sb: int, *, bm: int, bn: int, warps_m: int, warps_n: int, b_kmajor: bool,
              a_off, b_off, out: np.ndarray, bk: int = 64, a_mmajor: bool = False) -> None:
    """One staged k-tile (bk wide) of the mma.sync kernels' per-warp loop (ldmatrix lane addresses through
    a_off(row, chunk) and b_off(row, chunk), the fragment assignment, mma.sync) on every warp, and the
    epilogue positions: out[r, c] += the block tile's partial products (r, c relative to the tile).
    `a_mmajor`: a staged as [K, M] panels, its fragments read with ldmatrix.trans (k-row kk * 16 +
    (lane & 7) + 8 * (lane >> 4), chunk m / 8 + ((lane >> 3) & 1))."""
    warp_m, warp_n = bm // warps_m, bn // warps_n
    frags_m, frags_n = warp_m // 16, warp_n // 8
    for wm in range(warps_m):
        for wn in range(warps_n):
            acc = {(mi, ni): [[0.0] * 4 for _ in range(32)] for mi in range(frags_m) for ni in range(frags_n)}
            for kk in range(bk // 16):
                if a_mmajor:
                    af = [ldmatrix_x4(smem, [sa + a_off(kk * 16 + (lane & 7) + 8 * (lane >> 4),
                                                        (wm * warp_m + mi * 16) // 8 + ((lane >> 3) & 1))
                                             for lane in range(32)], True) for mi in range(frags_m)]
                else:
                    af = [ldmatrix_x4(smem, [sa + a_off(wm * warp_m + mi * 16 + (lane & 15), kk * 2 + (lane >> 4))
                                             for lane in range(32)], False) for mi in range(frags_m)]
                bf = {}
                for nj in range(frags_n // 2):
                    if b_kmajor:
                        addrs = [sb + b_off(wn * warp_n + nj * 16 + (lane & 7) + 8 * (lane >> 4),
                                            kk * 2 + ((lane >> 3) & 1)) for lane in range(32)]
                        q = ldmatrix_x4(smem, addrs, False)
                    else:
                        addrs = [sb + b_off(kk * 16 + (lane & 15), (wn * warp_n + nj * 16) // 8 + (lane >> 4))
                                 for lane in range(32)]
                        q = ldmatrix_x4(smem, addrs, True)
                    bf[2 * nj] = [(q[lane][0], q[lane][1]) for lane in range(32)]
                    bf[2 * nj + 1] = [(q[lane][2], q[lane][3]) for lane in range(32)]
                for mi in range(frags_m):
                    for ni in range(frags_n):
                        mma_16816(acc[(mi, ni)], af[mi], bf[ni])
            scatter(acc, out, wm, wn, warp_m, warp_n)


# ---- wgmma -------------------------------------------------------------------------------------------------

def desc(start: int, lbo: int, sbo: int) -> int:
    """A wgmma shared-memory descriptor with the 128-byte swizzle, packed as the kernels pack it."""
    return ((start & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (1 << 62)


def decode(d: int) -> tuple[int, int, int, int]:
    return (d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4, d >> 62


def operand_kmajor(smem: dict, d: int, rows: int) -> np.ndarray:
    """rows x 16 operand read K-major through descriptor d (canonical 128-byte swizzled layout: 8-row core
    matrices of 128-byte rows, SBO apart)."""
    start, _, sbo, mode = decode(d)
    assert mode == 1
    return np.array([[smem[swizzle128(start + (x % 8) * 128 + (x // 8) * sbo + k * 2)] for k in range(16)]
                     for x in range(rows)], dtype=float)


def operand_mnmajor(smem: dict, d: int, cols: int) -> np.ndarray:
    """16 x cols operand (k x n) read MN-major (transposed) through descriptor d: 64 n per 128-byte row, 8
    k-rows per 1024-byte atom; atoms LBO apart along n, SBO apart along k."""
    start, lbo, sbo, mode = decode(d)
    assert mode == 1
    return np.array([[smem[swizzle128(start + (n % 64) * 2 + (n // 64) * lbo + (k % 8) * 128 + (k // 8) * sbo)]
                      for n in range(cols)] for k in range(16)], dtype=float)


def wgmma_fragment_positions(n: int):
    """(tid, register) -> (row, col) of an m64nNk16 fp32 accumulator."""
    for tid in range(128):
        w, lane = tid // 32, tid % 32
        r = w * 16 + lane // 4
        for j in range(n // 8):
            c = j * 8 + (lane % 4) * 2
            yield (tid, 4 * j), (r, c)
            yield (tid, 4 * j + 1), (r, c + 1)
            yield (tid, 4 * j + 2), (r + 8, c)
            yield (tid, 4 * j + 3), (r + 8, c + 1)


def wgmma_block(smem: dict, stage: int, *, bm: int, bn: int, b_kmajor: bool, out: np.ndarray) -> None:
    """One staged k-tile of the generator's wgmma_stage on every consumer warpgroup, and store_tile's
    positions: out[r, c] += the block tile's partial products."""
    tile_a_bytes = bm * 64 * 2
    for c in range(bm // 64):
        regs = np.zeros((128, bn // 2))
        for kk in range(4):
            da = desc(stage + c * 64 * 64 * 2 + kk * 16 * 2, 16, 1024)
            if b_kmajor:
                db = desc(stage + tile_a_bytes + kk * 16 * 2, 16, 1024)
                B = operand_kmajor(smem, db, bn).T
            else:
                db = desc(stage + tile_a_bytes + kk * 16 * 64 * 2, 64 * 128, 1024)
                B = operand_mnmajor(smem, db, bn)
            D = operand_kmajor(smem, da, 64) @ B
            for (tid, i), (r, col) in wgmma_fragment_positions(bn):
                regs[tid, i] += D[r, col]
        for tid in range(128):  # store_tile
            w, lane = tid // 32, tid % 32
            r = c * 64 + w * 16 + lane // 4
            for j in range(bn // 8):
                col = j * 8 + (lane % 4) * 2
                out[r, col] += regs[tid, 4 * j]
                out[r, col + 1] += regs[tid, 4 * j + 1]
                out[r + 8, col] += regs[tid, 4 * j + 2]
                out[r + 8, col + 1] += regs[tid, 4 * j + 3]


# ---- one block tile through a whole k loop ------------------------------------------------------------------

def block_product(A: np.ndarray, B: np.ndarray, *, core: str, copy: str, b_kmajor: bool, bm: int, bn: int,
                  warps_m: int = 2, warps_n: int = 2, swizzle: bool = True) -> np.ndarray:
    """The block tile (rows 0..bm, cols 0..bn) of A @ B (B given as k x n; stored [N, K] when b_kmajor) as the
    generator's kernel computes it: per 64-wide k-tile, the stage filled by its loader (chunk copies into
    the chunk / panel layout, or TMA boxes), then the MMAs and the epilogue positions."""
    K = A.shape[1]
    out = np.zeros((bm, bn))
    for k0 in range(0, K, 64):
        a = np.zeros((bm, 64))
        a[:, :min(64, K - k0)] = A[:bm, k0:k0 + 64]
        b = np.zeros((64, bn))
        b[:min(64, K - k0), :] = B[k0:k0 + 64, :bn]
        smem: dict = {}
        stage = 0
        sb = stage + bm * 128
        if copy == "tma":
            tma_box(smem, stage, a)
            if b_kmajor:
                tma_box(smem, sb, b.T.copy())
            else:
                for j in range(bn // 64):
                    tma_box(smem, sb + j * 64 * 128, b[:, 64 * j:64 * j + 64])
        else:
            store_rows(smem, stage, a, lambda r, c: chunk_offset(r, c, swizzle))
            if b_kmajor:
                store_rows(smem, sb, b.T.copy(), lambda r, c: chunk_offset(r, c, swizzle))
            else:
                store_rows(smem, sb, b, lambda r, c: panel_offset(r, c, swizzle))
        if core == "mma":
            layout = chunk_offset if b_kmajor else panel_offset
            b_off = lambda r, c: layout(r, c, swizzle)  # noqa: E731
            mma_block(smem, stage, sb, bm=bm, bn=bn, warps_m=warps_m, warps_n=warps_n, b_kmajor=b_kmajor,
                      a_off=lambda r, c: chunk_offset(r, c, swizzle), b_off=b_off, out=out)
        else:
            wgmma_block(smem, stage, bm=bm, bn=bn, b_kmajor=b_kmajor, out=out)
    return out


# ---- the tiling of a call ----------------------------------------------------------------------------------

def find_tile(block: int, z: int, *, offs, M: int, N: int, groups: int, bm: int, bn: int, group_m: int):
    """The generator's find_tile: (z, rows, row0, m0, n0) of block (blockIdx.x, blockIdx.y = z), or None."""
    tiles_n = (N + bn - 1) // bn
    idx = block
    if offs is not None:
        start, zz, rows = 0, -1, 0
        for g in range(groups):
            end = min(max(offs[g], start), M)
            tiles = (end - start + bm - 1) // bm * tiles_n
            if idx < tiles:
                zz, rows = g, end - start
                break
            idx -= tiles
            start = end
        if zz < 0:
            return None
        z, row0 = zz, start
    else:
        rows, row0 = M, 0
    tiles_m = (rows + bm - 1) // bm
    per_group = group_m * tiles_n
    first_m = (idx // per_group) * group_m
    height = min(group_m, tiles_m - first_m)
    in_group = idx % per_group
    return z, rows, row0, (first_m + in_group % height) * bm, (in_group // height) * bn


def tiles_of(M: int, N: int, groups: int, grouped: bool, bm: int, bn: int) -> int:
    rows = (M + bm - 1) // bm + groups - 1 if grouped else (M + bm - 1) // bm
    return rows * ((N + bn - 1) // bn)


# ---- fp32 operands on TF32 tensor cores (mma.sync m16n8k8) --------------------------------------------------
# Shared memory here maps a byte offset to a 32-bit element. ldmatrix (.b16) reads a matrix of 8 rows of
# 16 bytes: with 32-bit elements, each row is 4 words and lane 4g + t receives word t of row g. The
# m16n8k8 TF32 fragments: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (k t, n g),
# b1 (k t + 4, n g); the accumulators as m16n8k16's.

def store_words(smem: dict, base: int, tile: np.ndarray, offset) -> None:
    """tile[r, 4c + e] at base + offset(r, c) + 4e: chunk copies of 16 bytes, 4 fp32 elements each."""
    rows, cols = tile.shape
    for r in range(rows):
        for c in range(cols // 4):
            o = base + offset(r, c)
            for e in range(4):
                smem[o + 4 * e] = tile[r, 4 * c + e]


def ldmatrix_x4_words(smem: dict, addrs: list[int]) -> list[list]:
    """Per lane, the four registers an ldmatrix.x4 (no .trans) gives of 32-bit elements."""
    return [[smem[addrs[8 * i + lane // 4] + 4 * (lane % 4)] for i in range(4)] for lane in range(32)]


def mma_1688(acc: list, a: list, b: list) -> None:
    """acc[lane] (4 floats) += A (16 x 8 from a[lane], 4 registers) @ B (8 x 8 from b[lane], 2 registers)."""
    A = np.zeros((16, 8))
    B = np.zeros((8, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for (r, c), v in zip(((g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)), a[lane]):
            A[r, c] = v
        B[t, g], B[t + 4, g] = b[lane]
    D = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        acc[lane] = [acc[lane][0] + D[g, 2 * t], acc[lane][1] + D[g, 2 * t + 1],
                     acc[lane][2] + D[g + 8, 2 * t], acc[lane][3] + D[g + 8, 2 * t + 1]]


def panel_word(r: int, c: int, swizzle: bool, bk: int = 32) -> int:
    """The generator's panel_word: element (r, c) of a panel-staged tile of fp32 (32 columns a panel)."""
    return panel_offset(r, c // 4, swizzle, bk) + (c % 4) * 4


def tf32_block(smem: dict, sa: int, sb: int, *, bm: int, bn: int, warps_m: int, warps_n: int, a_mmajor: bool,
               b_kmajor: bool, swizzle: bool, out: np.ndarray, bk: int = 32) -> None:
    """One staged k-tile (bk wide) of the TF32 mma_tile on every warp, as the template writes its lane
    formulas, and the epilogue positions: out[r, c] += the block tile's partial products."""
    warp_m, warp_n = bm // warps_m, bn // warps_n
    frags_m, frags_n = warp_m // 16, warp_n // 8
    for wm in range(warps_m):
        for wn in range(warps_n):
            acc = {(mi, ni): [[0.0] * 4 for _ in range(32)] for mi in range(frags_m) for ni in range(frags_n)}
            for kk in range(bk // 8):
                af = []
                for mi in range(frags_m):
                    if a_mmajor:
                        regs = []
                        for lane in range(32):
                            m, k = wm * warp_m + mi * 16 + lane // 4, kk * 8 + lane % 4
                            regs.append([smem[sa + panel_word(k, m, swizzle)], smem[sa + panel_word(k, m + 8, swizzle)],
                                         smem[sa + panel_word(k + 4, m, swizzle)],
                                         smem[sa + panel_word(k + 4, m + 8, swizzle)]])
                    else:
                        regs = ldmatrix_x4_words(smem, [sa + chunk_offset(wm * warp_m + mi * 16 + (lane & 15),
                                                                          kk * 2 + (lane >> 4), swizzle)
                                                        for lane in range(32)])
                    af.append(regs)
                bf = {}
                if b_kmajor:
                    for nj in range(frags_n // 2):
                        q = ldmatrix_x4_words(smem, [sb + chunk_offset(wn * warp_n + nj * 16 + (lane & 7) + 8 * (lane >> 4),
                                                                       kk * 2 + ((lane >> 3) & 1), swizzle)
                                                     for lane in range(32)])
                        bf[2 * nj] = [(q[lane][0], q[lane][1]) for lane in range(32)]
                        bf[2 * nj + 1] = [(q[lane][2], q[lane][3]) for lane in range(32)]
                else:
                    for ni in range(frags_n):
                        regs = []
                        for lane in range(32):
                            n, k = wn * warp_n + ni * 8 + lane // 4, kk * 8 + lane % 4
                            regs.append((smem[sb + panel_word(k, n, swizzle)], smem[sb + panel_word(k + 4, n, swizzle)]))
                        bf[ni] = regs
                for mi in range(frags_m):
                    for ni in range(frags_n):
                        mma_1688(acc[(mi, ni)], af[mi], bf[ni])
            scatter(acc, out, wm, wn, warp_m, warp_n)


def tf32_block_product(A: np.ndarray, B: np.ndarray, *, a_mmajor: bool, b_kmajor: bool, bm: int, bn: int,
                       warps_m: int = 2, warps_n: int = 2, swizzle: bool = True) -> np.ndarray:
    """The block tile of A @ B (A m x k, B k x n) as the generator's TF32 kernel computes it: per 32-wide
    k-tile, a staged K-major (rows of m) or, stored [K, M], in 32-column panels of its k-rows; b K-major
    (rows of n) or in panels; then the MMAs and the epilogue positions."""
    K = A.shape[1]
    out = np.zeros((bm, bn))
    for k0 in range(0, K, 32):
        a = np.zeros((bm, 32))
        a[:, :min(32, K - k0)] = A[:bm, k0:k0 + 32]
        b = np.zeros((32, bn))
        b[:min(32, K - k0), :] = B[k0:k0 + 32, :bn]
        smem: dict = {}
        sa, sb = 0, bm * 128
        if a_mmajor:
            store_words(smem, sa, a.T.copy(), lambda r, c: panel_offset(r, c, swizzle, 32))
        else:
            store_words(smem, sa, a, lambda r, c: chunk_offset(r, c, swizzle))
        if b_kmajor:
            store_words(smem, sb, b.T.copy(), lambda r, c: chunk_offset(r, c, swizzle))
        else:
            store_words(smem, sb, b, lambda r, c: panel_offset(r, c, swizzle, 32))
        tf32_block(smem, sa, sb, bm=bm, bn=bn, warps_m=warps_m, warps_n=warps_n, a_mmajor=a_mmajor,
                   b_kmajor=b_kmajor, swizzle=swizzle, out=out)
    return out


def mmajor_block_product(A: np.ndarray, B: np.ndarray, *, b_kmajor: bool, bm: int, bn: int, warps_m: int = 2,
                         warps_n: int = 2, swizzle: bool = True) -> np.ndarray:
    """The 16-bit mma.sync kernel's block tile with a stored [K, M]: per 64-wide k-tile, a's k-rows in
    64-column panels (read with ldmatrix.trans), b as block_product stages it; then mma_block."""
    K = A.shape[1]
    out = np.zeros((bm, bn))
    for k0 in range(0, K, 64):
        a = np.zeros((bm, 64))
        a[:, :min(64, K - k0)] = A[:bm, k0:k0 + 64]
        b = np.zeros((64, bn))
        b[:min(64, K - k0), :] = B[k0:k0 + 64, :bn]
        smem: dict = {}
        sa, sb = 0, bm * 128
        store_rows(smem, sa, a.T.copy(), lambda r, c: panel_offset(r, c, swizzle))
        layout = chunk_offset if b_kmajor else panel_offset
        store_rows(smem, sb, b.T.copy() if b_kmajor else b, lambda r, c: layout(r, c, swizzle))
        mma_block(smem, sa, sb, bm=bm, bn=bn, warps_m=warps_m, warps_n=warps_n, b_kmajor=b_kmajor,
                  a_off=lambda r, c: panel_offset(r, c, swizzle), b_off=lambda r, c: layout(r, c, swizzle), out=out,
                  a_mmajor=True)
    return out
