// Copyright 2026 The pi0_ros Authors
// SPDX-License-Identifier: Apache-2.0
//
// The action expert's projections at batch 1 (at most 64 rows) with their neighbours fused,
// compiled at run time by NVRTC (cluster_expert.py defines MODE, CLUSTER, BLOCK_N, K_SLICE,
// K_DIM, WARPS, HEAD_DIM, Q_HEADS and KERNEL_NAME before this text).
//
// A thread-block cluster of CLUSTER blocks owns BLOCK_N output columns; each block multiplies
// the rows by one K_SLICE of the weight on the tensor cores (bf16 in, float32 out) and keeps
// its partial product in shared memory. The cluster adds the partials up on chip (distributed
// shared memory, a fixed order: the same result every run), so split-K needs neither float32
// partials in global memory nor a kernel after it to add them up. Modes:
//   MODE_QKV    a = the residual stream as bf16 rows, times [q; k; v]; the RMS normalization
//               as a row factor (from the row sums of squares that the kernel before it left),
//               RoPE on q and k, q into `out`, k and v into the cache rows
//   MODE_RESID  a = half rows (attention output, GELU * up): x[:, cols] += a @ W^T (float32
//               residual stream), its bf16 copy into `out` and the tile's row sums of squares
//               into `sumsq_out` (the next projection's normalization)
//   MODE_GELU   a = the residual stream as bf16 rows, normalized as in MODE_QKV, times
//               [gate; up]: out = gelu(gate) * up
// Each block copies its weight slab into shared memory (cp.async, 16-byte pieces) before it
// waits for the previous kernel (programmatic dependent launch), so the weight stream overlaps
// the kernels before it.
//
// The text needs no CUDA headers (NVRTC compiles it with what PyTorch's wheels carry): the
// tensor-core products, the cluster barrier and the remote shared-memory reads are PTX.

#ifndef ABLATE
#define ABLATE 0  // measurement only: 1 = no tensor-core products, 2 = no cluster reduction
#endif

#define MODE_QKV 0
#define MODE_RESID 1
#define MODE_GELU 2

constexpr int ROWS = 64;                     // rows padded to four 16-row fragments
constexpr int GROUPS = BLOCK_N / 16;         // 16-column fragment groups per tile
constexpr int GROUPS_PER_WARP = GROUPS / WARPS;
constexpr int K_STEPS = K_SLICE / 16;
constexpr int A_LD = K_SLICE + 8;            // bf16 elements per staged row (bank spread)
constexpr int W_LD = K_SLICE + 8;            // bf16 elements per staged weight row
constexpr int C_LD = BLOCK_N + 4;            // float elements per partial row
constexpr int ROWS_PER_RANK = ROWS / CLUSTER;
// The weight slab's place, which the partial product takes over after the products.
constexpr int SLAB_BYTES = BLOCK_N * W_LD * 2 > ROWS * C_LD * 4 ? BLOCK_N * W_LD * 2
                                                                 : ROWS * C_LD * 4;
constexpr int SUBS = BLOCK_N >= 32 ? BLOCK_N / 32 : 1;  // warps per tile row (MODE_RESID)
constexpr int THREADS = WARPS * 32;
constexpr int HALF_DIM = HEAD_DIM / 2;
constexpr int QUARTERS = HALF_DIM / 32;      // MODE_QKV tiles per head (BLOCK_N = 64)
static_assert(GROUPS % WARPS == 0, "column groups must divide among the warps");
static_assert(ROWS % CLUSTER == 0 && (ROWS / CLUSTER) * 32 % (WARPS * 32) == 0,
              "the cluster's rows must divide among the threads");

typedef unsigned short bf16;  // bit pattern of a bfloat16

__device__ __forceinline__ unsigned pack_bf16(float low, float high) {
  unsigned packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(high), "f"(low));
  return packed;
}

__device__ __forceinline__ bf16 to_bf16(float value) {
  return static_cast<bf16>(pack_bf16(value, 0.0f) & 0xffffu);
}

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// A float in the shared memory of the cluster's block `rank`, at the place of `local`.
__device__ __forceinline__ float load_remote(const float* local, unsigned rank) {
  unsigned remote;
  float value;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote) : "r"(shared_address(local)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(remote) : "memory");
  return value;
}

// 16 bytes global -> shared through the async copy unit (no registers; the rest of the 16
// zero-filled when bytes < 16), volatile: ptxas keeps it before the wait for the previous
// kernel (griddepcontrol.wait), which it would otherwise move above plain loads of read-only
// data.
// 16 bytes global -> shared through the async copy unit (no registers; the rest of the 16
// zero-filled when bytes < 16), volatile: ptxas keeps it before the wait for the previous
// kernel (griddepcontrol.wait), which it would otherwise move above plain loads of read-only
// data.
// 16 bytes of float32, volatile: the compiler keeps every such load before the work that
// uses them (all in flight at once) instead of interleaving a few with that work.
__device__ __forceinline__ float4 load_float4(const float* pointer) {
  float4 value;
  asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(value.x), "=f"(value.y), "=f"(value.z), "=f"(value.w)
               : "l"(pointer) : "memory");
  return value;
}

__device__ __forceinline__ void copy_async(void* shared, const void* global, int bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(shared_address(shared)), "l"(global), "r"(bytes) : "memory");
}

// The value at `local` in every block of the cluster, all loads issued before any is used.
__device__ __forceinline__ void gather_cluster(float (&values)[CLUSTER], const float* local,
                                               int rank) {
#pragma unroll
  for (int s = 0; s < CLUSTER; ++s)
    values[s] = (ABLATE & 2) ? (s == rank ? *local : 0.0f) : load_remote(local, s);
}

// Ranks in order: every run adds the partial products in the same order.
__device__ __forceinline__ float sum_ranks(const float (&values)[CLUSTER]) {
  float total = values[0];
#pragma unroll
  for (int s = 1; s < CLUSTER; ++s) total += values[s];
  return total;
}

__device__ __forceinline__ void load_fragment(unsigned (&a)[4], const bf16* pointer) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(shared_address(pointer)));
}

__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], uint2 b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

// First weight row (output channel) of a tile's 16-column group.
__device__ __forceinline__ int group_channel(int tile, int group, int up_offset) {
#if MODE == MODE_QKV
  // Tile = (head, quarter): 32 dims of the first half of the head and their RoPE partners.
  const int head = tile / QUARTERS, quarter = tile % QUARTERS;
  const int dim = group < 2 ? 32 * quarter + 16 * group
                            : HALF_DIM + 32 * quarter + 16 * (group - 2);
  return head * HEAD_DIM + dim;
#elif MODE == MODE_GELU
  const int half = GROUPS / 2;
  return group < half ? tile * (BLOCK_N / 2) + 16 * group
                      : up_offset + tile * (BLOCK_N / 2) + 16 * (group - half);
#else
  return tile * BLOCK_N + 16 * group;
#endif
}

__device__ __forceinline__ float gelu_tanh(float v) {
  const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  return 0.5f * v * (1.0f + tanhf(inner));
}

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(WARPS * 32)
KERNEL_NAME(const bf16* __restrict__ w, const bf16* a, float* x, bf16* out,
            bf16* __restrict__ k_rows, bf16* __restrict__ v_rows,
            const float* __restrict__ cos_t, const float* __restrict__ sin_t,
            const float* sumsq_in, float* sumsq_out, int n_rows, int x_width, int up_offset,
            int cache_stride, int sumsq_tiles, float eps) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* w_s = reinterpret_cast<bf16*>(smem);                           // [BLOCK_N][W_LD]
  float* c_s = reinterpret_cast<float*>(smem);                         // [ROWS][C_LD], later
  bf16* a_s = reinterpret_cast<bf16*>(smem + SLAB_BYTES);              // [ROWS][A_LD]
  float* rows_s = reinterpret_cast<float*>(a_s + ROWS * A_LD);         // [ROWS_PER_RANK][SUBS]
  float* scale_s = rows_s + ROWS_PER_RANK * SUBS;                      // [ROWS_PER_RANK]

  const int rank = static_cast<int>(cluster_rank());
  const int tile = blockIdx.x / CLUSTER;
  const int k0 = rank * K_SLICE;
  const int row0 = rank * ROWS_PER_RANK;  // the rows this block finishes
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  // The weights do not depend on the previous kernel: start copying this block's slab into
  // shared memory before waiting for that kernel, so it streams from HBM while that finishes.
  constexpr int PIECES = K_SLICE / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < BLOCK_N * PIECES; i += THREADS) {
    const int row = i / PIECES, piece = i % PIECES;
    copy_async(w_s + row * W_LD + 8 * piece,
               w + static_cast<size_t>(group_channel(tile, row / 16, up_offset) + row % 16)
                   * K_DIM + k0 + 8 * piece);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");

  // The rows' K slice, straight into shared memory (rows past n_rows zero-filled).
  for (int i = threadIdx.x; i < ROWS * PIECES; i += THREADS) {
    const int r = i / PIECES, piece = i % PIECES;
    copy_async(a_s + r * A_LD + 8 * piece,
               a + static_cast<size_t>(r < n_rows ? r : 0) * K_DIM + k0 + 8 * piece,
               r < n_rows ? 16 : 0);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
#if MODE != MODE_RESID
  // Row factor of the RMS normalization: rsqrt(mean of squares + eps) from the tiles' sums
  // (added in order), 1 where the rows come normalized (sumsq_tiles == 0).
  if (threadIdx.x < ROWS_PER_RANK) {
    float sum = 0.0f;
    for (int t = 0; t < sumsq_tiles; ++t) sum += sumsq_in[t * ROWS + row0 + threadIdx.x];
    scale_s[threadIdx.x] = sumsq_tiles ? rsqrtf(sum / static_cast<float>(x_width) + eps)
                                       : 1.0f;
  }
#endif
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();

  // rows [64 x K_SLICE] x weight slab [K_SLICE x BLOCK_N] on the tensor cores: each warp
  // owns GROUPS_PER_WARP 16-column groups (two 8-column mma tiles each) for all 64 rows.
  const int quad = lane & 3, lane_row = lane >> 2;
  float acc[GROUPS_PER_WARP][4][2][4];
#pragma unroll
  for (int g = 0; g < GROUPS_PER_WARP; ++g)
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[g][r][n][e] = 0.0f;
#pragma unroll
  for (int i = 0; i < K_STEPS; ++i) {
    unsigned af[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
      load_fragment(af[r], a_s + (16 * r + (lane & 15)) * A_LD + 16 * i + 8 * (lane >> 4));
#pragma unroll
    for (int g = 0; g < GROUPS_PER_WARP; ++g) {
      // Both 8-channel halves of the group: {b0, b1} of the first, then of the second.
      unsigned bf[4];
      load_fragment(bf, w_s + (16 * (warp + g * WARPS) + (lane & 7) + 8 * (lane >> 4)) * W_LD
                            + 16 * i + 8 * ((lane >> 3) & 1));
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int n = 0; n < 2; ++n)
          if (!(ABLATE & 1)) mma(acc[g][r][n], af[r], make_uint2(bf[2 * n], bf[2 * n + 1]));
    }
  }
  __syncthreads();  // the partial product overwrites the weight slab
#pragma unroll
  for (int g = 0; g < GROUPS_PER_WARP; ++g)
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        float* dst = c_s + (16 * r + lane_row) * C_LD + 16 * (warp + g * WARPS) + 8 * n
                     + 2 * quad;
        *reinterpret_cast<float2*>(dst) = make_float2(acc[g][r][n][0], acc[g][r][n][1]);
        *reinterpret_cast<float2*>(dst + 8 * C_LD) =
            make_float2(acc[g][r][n][2], acc[g][r][n][3]);
      }
  cluster_sync();  // every block's partial product is in its shared memory

  // This block adds up its rows of the cluster's partials (ranks in order) and finishes them:
  // every remote load first, then the arithmetic.
#if MODE == MODE_QKV
  // Pairs (d, d + HALF_DIM) of one head: columns c and c + 32 of the tile.
  constexpr int ITEMS = ROWS_PER_RANK * 32 / THREADS;
  const int head = tile / QUARTERS, quarter = tile % QUARTERS;
  float firsts[ITEMS][CLUSTER], seconds[ITEMS][CLUSTER];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x + j * THREADS, r = row0 + i / 32, c = i % 32;
    gather_cluster(firsts[j], c_s + r * C_LD + c, rank);
    gather_cluster(seconds[j], c_s + r * C_LD + c + 32, rank);
  }
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x + j * THREADS, r = row0 + i / 32, c = i % 32;
    if (r >= n_rows) continue;
    const float scale = scale_s[r - row0];
    const float first = sum_ranks(firsts[j]) * scale, second = sum_ranks(seconds[j]) * scale;
    const int dim = 32 * quarter + c;  // in the first half of the head
    if (head <= Q_HEADS) {  // the query heads and the key head: rotate
      const float cs = cos_t[r * HALF_DIM + dim], sn = sin_t[r * HALF_DIM + dim];
      const float o1 = first * cs - second * sn, o2 = second * cs + first * sn;
      bf16* dst = head < Q_HEADS
          ? out + static_cast<size_t>(r) * (Q_HEADS * HEAD_DIM) + head * HEAD_DIM
          : k_rows + static_cast<size_t>(r) * cache_stride;
      dst[dim] = to_bf16(o1);
      dst[dim + HALF_DIM] = to_bf16(o2);
    } else {  // the value head
      bf16* dst = v_rows + static_cast<size_t>(r) * cache_stride;
      dst[dim] = to_bf16(first);
      dst[dim + HALF_DIM] = to_bf16(second);
    }
  }
#elif MODE == MODE_GELU
  constexpr int HALF = BLOCK_N / 2;
  constexpr int ITEMS = ROWS_PER_RANK * HALF / THREADS;
  float gates[ITEMS][CLUSTER], ups[ITEMS][CLUSTER];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x + j * THREADS, r = row0 + i / HALF, c = i % HALF;
    gather_cluster(gates[j], c_s + r * C_LD + c, rank);
    gather_cluster(ups[j], c_s + r * C_LD + c + HALF, rank);
  }
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x + j * THREADS, r = row0 + i / HALF, c = i % HALF;
    if (r >= n_rows) continue;
    const float scale = scale_s[r - row0];
    out[static_cast<size_t>(r) * up_offset + tile * HALF + c] =
        to_bf16(gelu_tanh(sum_ranks(gates[j]) * scale) * (sum_ranks(ups[j]) * scale));
  }
#else
  // The residual add; its bf16 copy and the tile's row sums of squares for the next
  // normalization (each row's BLOCK_N columns lie in SUBS whole warps: shuffles, then the
  // warps' shares in order).
  static_assert(BLOCK_N % 32 == 0, "a tile row spans whole warps");
  constexpr int ITEMS = ROWS_PER_RANK * BLOCK_N / THREADS;
  float parts[ITEMS][CLUSTER];
  float previous[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x + j * THREADS, r = row0 + i / BLOCK_N, c = i % BLOCK_N;
    gather_cluster(parts[j], c_s + r * C_LD + c, rank);
    previous[j] = r < n_rows ? x[static_cast<size_t>(r) * x_width + tile * BLOCK_N + c] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int i = threadIdx.x + j * THREADS, r = row0 + i / BLOCK_N, c = i % BLOCK_N;
    const float value = previous[j] + sum_ranks(parts[j]);
    if (r < n_rows) {
      const size_t at = static_cast<size_t>(r) * x_width + tile * BLOCK_N + c;
      x[at] = value;
      out[at] = to_bf16(value);
    }
    float square = r < n_rows ? value * value : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      square += __shfl_xor_sync(0xffffffffu, square, offset);
    if (lane == 0) rows_s[(r - row0) * SUBS + c / 32] = square;
  }
  __syncthreads();
  if (threadIdx.x < ROWS_PER_RANK) {
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < SUBS; ++q) sum += rows_s[threadIdx.x * SUBS + q];
    sumsq_out[tile * ROWS + row0 + threadIdx.x] = sum;
  }
#endif
  cluster_sync();  // no block leaves while another still reads its shared memory
}
