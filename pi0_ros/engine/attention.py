# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Attention of many query rows over Pi0's single KV head (Triton on CUDA, PyTorch elsewhere).

Pi0's Gemma layers have 8 query heads and one KV head, so the heads fold into the query rows
(row = token * heads + head) and attention becomes one [rows, keys] problem per observation.
The mask is never materialized: a key is visible when its additive bias is 0 (padding of the
instruction is -inf) and, for the first `state_rows` rows (the state token's heads), when it
lies before `state_keys` (the state token sees the prefix and itself, not the actions).

Two launch shapes (kernel_configs.ATTENTION, per batch size):
  suffix  the 408 denoising rows: keys split over programs (flash-decoding), each keeps a
          float32 online softmax, a second kernel merges the splits; with PDL the first row
          block of each split asks for the split's keys and values in L2 before it waits
  prefix  thousands of rows: one pass over the keys per program, normalized output written
          directly
"""
import torch

from pi0_ros.engine import kernel_configs, kernels
from pi0_ros.engine.kernels import triton

LOG2E = 1.4426950408889634

if triton is not None:
    import triton.language as tl

    from pi0_ros.engine.kernels import pdl_enter, prefetch_l2

    @triton.jit
    def _load_rows(ptrs, row_ok, dims, VALID_DIMS: tl.constexpr, CACHE: tl.constexpr):
        # A [rows, HEAD_DIM] tile; with VALID_DIMS > 0 the padding dims read as 0.
        if VALID_DIMS > 0:
            return tl.load(ptrs, mask=row_ok[:, None] & (dims < VALID_DIMS)[None, :], other=0.0,
                           cache_modifier=CACHE)
        else:
            return tl.load(ptrs, mask=row_ok[:, None], other=0.0, cache_modifier=CACHE)

    @triton.jit
    def attend_block(q_ptr, k_ptr, v_ptr, bias_ptr, out_ptr, part_o_ptr, part_m_ptr,
                     part_l_ptr, block_m, split, batch, n_splits, n_queries, n_keys,
                     keys_per_split, scale_log2, state_rows, state_keys, stride_qb, stride_qm,
                     stride_kb, stride_kn, stride_vb, stride_vn, stride_bias_b, stride_ob,
                     stride_om, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, CACHE: tl.constexpr,
                     VALID_DIMS: tl.constexpr = 0, MASKED: tl.constexpr = True):
        """
        One block of BLOCK_M query rows over one split of the keys (online softmax).

        SPLIT: write the float32 partials (o, running max, sum) of this split for merge_rows;
        else the normalized output. CACHE is the load cache modifier of the queries, keys and
        values ('.cg' when other programs of the same launch wrote them). VALID_DIMS > 0: heads
        of that many dims, padded to the power of two HEAD_DIM (the rest is neither read nor
        written). MASKED False: no key bias and no state rows (bias_ptr is not read).
        """
        rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        row_ok = rows < n_queries
        q = _load_rows(q_ptr + batch * stride_qb + rows[:, None] * stride_qm + dims[None, :],
                       row_ok, dims, VALID_DIMS, CACHE)
        state_row = rows[:, None] < state_rows
        m_i = tl.full([BLOCK_M], float('-inf'), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        start = split * keys_per_split
        stop = tl.minimum(start + keys_per_split, n_keys)
        for key_start in range(start, stop, BLOCK_N):
            keys = key_start + tl.arange(0, BLOCK_N)
            key_ok = keys < stop
            k = _load_rows(k_ptr + batch * stride_kb + keys[:, None] * stride_kn + dims[None, :],
                           key_ok, dims, VALID_DIMS, CACHE)
            # Scores in the log2 domain (exp2 below); masked keys are -inf.
            scores = tl.dot(q, tl.trans(k)) * scale_log2
            if MASKED:
                bias = tl.load(bias_ptr + batch * stride_bias_b + keys, mask=key_ok,
                               other=float('-inf'))
                scores += bias[None, :]
                scores = tl.where(state_row & (keys[None, :] >= state_keys), float('-inf'),
                                  scores)
            else:
                scores = tl.where(key_ok[None, :], scores, float('-inf'))
            m_new = tl.maximum(m_i, tl.max(scores, 1))
            # Rows whose keys so far are all masked keep a finite reference (no inf - inf).
            m_ref = tl.where(m_new == float('-inf'), 0.0, m_new)
            alpha = tl.exp2(m_i - m_ref)
            p = tl.exp2(scores - m_ref[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = _load_rows(v_ptr + batch * stride_vb + keys[:, None] * stride_vn + dims[None, :],
                           key_ok, dims, VALID_DIMS, CACHE)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        if SPLIT:
            part = (batch * n_splits + split) * n_queries + rows
            tl.store(part_o_ptr + part[:, None] * HEAD_DIM + dims[None, :], acc,
                     mask=row_ok[:, None])
            tl.store(part_m_ptr + part, m_i, mask=row_ok)
            tl.store(part_l_ptr + part, l_i, mask=row_ok)
        else:
            out = acc / l_i[:, None]
            store_ok = row_ok[:, None]
            if VALID_DIMS > 0:
                store_ok = store_ok & (dims < VALID_DIMS)[None, :]
            tl.store(out_ptr + batch * stride_ob + rows[:, None] * stride_om + dims[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=store_ok)

    @triton.jit
    def merge_rows(part_o_ptr, part_m_ptr, part_l_ptr, out_ptr, row0, batch, n_queries,
                   stride_ob, stride_om, N_SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr,
                   ROWS: tl.constexpr, CACHE: tl.constexpr):
        """Merge the N_SPLITS partials of query rows row0..row0+ROWS-1 into their outputs."""
        rows = row0 + tl.arange(0, ROWS)
        row_ok = rows < n_queries
        dims = tl.arange(0, HEAD_DIM)
        base = batch * N_SPLITS * n_queries + rows
        m_max = tl.full([ROWS], float('-inf'), tl.float32)
        for split in tl.static_range(N_SPLITS):
            m_max = tl.maximum(m_max, tl.load(part_m_ptr + base + split * n_queries,
                                              mask=row_ok, other=0.0, cache_modifier=CACHE))
        total = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, HEAD_DIM], tl.float32)
        for split in tl.static_range(N_SPLITS):
            index = base + split * n_queries
            weight = tl.exp2(tl.load(part_m_ptr + index, mask=row_ok, other=0.0,
                                     cache_modifier=CACHE) - m_max)
            total += tl.load(part_l_ptr + index, mask=row_ok, other=1.0,
                             cache_modifier=CACHE) * weight
            acc += tl.load(part_o_ptr + index[:, None] * HEAD_DIM + dims[None, :],
                           mask=row_ok[:, None], other=0.0, cache_modifier=CACHE) \
                * weight[:, None]
        tl.store(out_ptr + batch * stride_ob + rows[:, None] * stride_om + dims[None, :],
                 (acc / total[:, None]).to(out_ptr.dtype.element_ty), mask=row_ok[:, None])

    @triton.jit
    def _attention_kernel(q_ptr, k_ptr, v_ptr, bias_ptr, out_ptr, part_o_ptr, part_m_ptr,
                          part_l_ptr, n_queries, n_keys, keys_per_split, scale_log2,
                          state_rows, state_keys, stride_qb, stride_qm, stride_kb, stride_kn,
                          stride_vb, stride_vn, stride_bias_b, stride_ob, stride_om,
                          HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, USE_PDL: tl.constexpr,
                          PREFETCH_KEYS: tl.constexpr, LINE_ELEMENTS: tl.constexpr):
        if PREFETCH_KEYS > 0:
            if tl.program_id(0) == 0:
                # Before the PDL wait, the first row block asks for its split's keys and values
                # in L2: the prefix's cache does not change while the denoiser runs, and the
                # suffix rows the previous kernel writes go through L2 anyway.
                first = tl.program_id(1) * keys_per_split
                last = tl.minimum(first + keys_per_split, n_keys) - 1
                key = tl.minimum(first + tl.arange(0, PREFETCH_KEYS), last)
                line = tl.arange(0, HEAD_DIM // LINE_ELEMENTS) * LINE_ELEMENTS
                batch = tl.program_id(2)
                prefetch_l2(k_ptr + batch * stride_kb + key[:, None] * stride_kn + line[None, :])
                prefetch_l2(v_ptr + batch * stride_vb + key[:, None] * stride_vn + line[None, :])
        pdl_enter(USE_PDL)
        attend_block(q_ptr, k_ptr, v_ptr, bias_ptr, out_ptr, part_o_ptr, part_m_ptr,
                     part_l_ptr, tl.program_id(0), tl.program_id(1), tl.program_id(2),
                     tl.num_programs(1), n_queries, n_keys, keys_per_split, scale_log2,
                     state_rows, state_keys, stride_qb, stride_qm, stride_kb, stride_kn,
                     stride_vb, stride_vn, stride_bias_b, stride_ob, stride_om, HEAD_DIM,
                     BLOCK_M, BLOCK_N, SPLIT, '')

    @triton.jit
    def _merge_splits_kernel(part_o_ptr, part_m_ptr, part_l_ptr, out_ptr, n_queries,
                             stride_ob, stride_om, N_SPLITS: tl.constexpr,
                             HEAD_DIM: tl.constexpr, ROWS: tl.constexpr, USE_PDL: tl.constexpr,
                             LAUNCH_FIRST: tl.constexpr):
        pdl_enter(USE_PDL, LAUNCH_FIRST)
        merge_rows(part_o_ptr, part_m_ptr, part_l_ptr, out_ptr, tl.program_id(0) * ROWS,
                   tl.program_id(1), n_queries, stride_ob, stride_om, N_SPLITS, HEAD_DIM, ROWS,
                   '')

    @triton.jit
    def _self_attention_kernel(qkv_ptr, out_ptr, n_tokens, scale_log2,
                               stride_qkv_image, stride_qkv_token, stride_out_image,
                               stride_out_token, HEADS: tl.constexpr, DIMS: tl.constexpr,
                               HEAD_DIM: tl.constexpr, VALID_DIMS: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               USE_PDL: tl.constexpr):
        # One block of query rows of one head of one image; q | k | v side by side per token.
        image, head = tl.program_id(1) // HEADS, tl.program_id(1) % HEADS
        q_ptr = qkv_ptr + image.to(tl.int64) * stride_qkv_image + head * DIMS
        pdl_enter(USE_PDL)
        attend_block(q_ptr, q_ptr + HEADS * DIMS, q_ptr + 2 * HEADS * DIMS, q_ptr,
                     out_ptr + image.to(tl.int64) * stride_out_image + head * DIMS,
                     out_ptr, out_ptr, out_ptr, tl.program_id(0), 0, 0, 1, n_tokens, n_tokens,
                     n_tokens, scale_log2, 0, 0, 0, stride_qkv_token, 0, stride_qkv_token, 0,
                     stride_qkv_token, 0, 0, stride_out_token, HEAD_DIM, BLOCK_M, BLOCK_N, False,
                     '', VALID_DIMS, False)


def self_attention(qkv: torch.Tensor, heads: int, scale: float) -> 'torch.Tensor | None':
    """
    Return unmasked multi-head self-attention of qkv [k, n, 3W] as [k * n, W] (or None).

    q | k | v side by side per token, heads of W / heads dims; the heads of the result side by
    side (SigLIP's attention, before its out projection).

    One Triton launch (no layout copies; heads padded to a power of two in registers) where
    kernel_configs.VISION_ATTENTION_TRITON is on, ATTENTION['vision'] covers the image count
    and the Triton kernels run in half precision; None otherwise (the caller uses SDPA).
    """
    images, tokens, width3 = qkv.shape
    width = width3 // 3
    dims = width // heads
    config = kernel_configs.attention_config('vision', images, covered_only=True)
    if not (kernel_configs.VISION_ATTENTION_TRITON and config and kernels.use_triton(qkv)
            and qkv.dtype != torch.float32 and qkv.stride(-1) == 1 and dims >= 16):
        return None
    out = torch.empty(images * tokens, width, dtype=qkv.dtype, device=qkv.device)
    pdl = kernels.use_pdl(qkv)
    _self_attention_kernel[(triton.cdiv(tokens, config['block_m']), images * heads)](
        qkv, out, tokens, scale * LOG2E, qkv.stride(0), qkv.stride(1), tokens * width, width,
        HEADS=heads, DIMS=dims, HEAD_DIM=triton.next_power_of_2(dims),
        VALID_DIMS=0 if dims & (dims - 1) == 0 else dims, BLOCK_M=config['block_m'],
        BLOCK_N=config['block_n'], USE_PDL=pdl, num_warps=config['num_warps'],
        num_stages=config['num_stages'], launch_pdl=pdl)
    return out


def key_bias(key_mask: torch.Tensor, extra_keys: int = 0) -> torch.Tensor:
    """
    Additive float32 bias [b, P + extra_keys]: 0 for real prefix tokens, -inf for padding.

    key_mask [b, ..., P] bool (True = real token); the extra (suffix) keys are always visible.
    """
    b, length = key_mask.shape[0], key_mask.shape[-1]
    bias = torch.zeros(b, length + extra_keys, dtype=torch.float32, device=key_mask.device)
    bias[:, :length].masked_fill_(~key_mask.reshape(b, length), float('-inf'))
    return bias


def dense_mask(bias: torch.Tensor, n_queries: int, state_rows: int, state_keys: int,
               dtype: torch.dtype) -> torch.Tensor:
    """Return the additive mask [b, n_queries | 1, L] that attention() applies (PyTorch)."""
    if state_rows == 0:
        return bias[:, None, :].to(dtype)
    mask = torch.empty(bias.shape[0], n_queries, bias.shape[1], dtype=dtype, device=bias.device)
    mask.copy_(bias[:, None, :])
    mask[:, :state_rows, state_keys:] = float('-inf')
    return mask


def use_kernel(queries: torch.Tensor) -> bool:
    """Tell whether the Triton kernels run: half precision on CUDA, head_dim a power of 2."""
    head_dim = queries.shape[-1]
    return (kernels.use_triton(queries) and queries.dtype != torch.float32
            and head_dim >= 16 and head_dim & (head_dim - 1) == 0)


def attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
              bias: torch.Tensor, scale: float, state_rows: int = 0,
              state_keys: int = 0, shape: str = None) -> torch.Tensor:
    """
    Masked attention of queries [b,M,D] over one KV head keys/values [b,L,D] (last dim dense).

    bias [b, L] float32 additive (0 / -inf); rows < state_rows see only keys < state_keys.
    Every row must see at least one key. shape picks the launch configuration ('suffix' or
    'prefix'; by default by row count).
    """
    if not use_kernel(queries):
        mask = dense_mask(bias, queries.shape[1], state_rows, state_keys, queries.dtype)
        scores = torch.baddbmm(mask, queries, keys.transpose(1, 2), alpha=scale)
        # Softmax accumulates in float32 internally and rounds once to the query dtype.
        return torch.bmm(torch.softmax(scores, dim=-1), values)
    shape = shape or ('suffix' if queries.shape[1] <= 1024 else 'prefix')
    return _launch(queries, keys, values, bias, scale, state_rows, state_keys,
                   kernel_configs.attention_config(shape, queries.shape[0]))


def _launch(queries, keys, values, bias, scale, state_rows, state_keys, config):
    batch, n_queries, head_dim = queries.shape
    n_keys = keys.shape[1]
    keys_per_split = config['keys_per_split'] or n_keys
    n_splits = triton.cdiv(n_keys, keys_per_split)
    split = n_splits > 1
    out = torch.empty_like(queries)
    if split:
        part_o = torch.empty(batch, n_splits, n_queries, head_dim, dtype=torch.float32,
                             device=queries.device)
        part_m = torch.empty(batch, n_splits, n_queries, dtype=torch.float32,
                             device=queries.device)
        part_l = torch.empty_like(part_m)
    else:
        part_o = part_m = part_l = out
    block_m = config['block_m']
    pdl = kernels.use_pdl(queries)
    line_elements = 128 // keys.element_size()
    prefetch = (pdl and split and batch <= kernel_configs.SUFFIX_KV_PREFETCH_MAX_BATCH
                and head_dim % line_elements == 0)
    _attention_kernel[(triton.cdiv(n_queries, block_m), n_splits, batch)](
        queries, keys, values, bias, out, part_o, part_m, part_l, n_queries, n_keys,
        keys_per_split, scale * LOG2E, state_rows, state_keys, queries.stride(0),
        queries.stride(1), keys.stride(0), keys.stride(1), values.stride(0), values.stride(1),
        bias.stride(0), out.stride(0), out.stride(1), HEAD_DIM=head_dim, BLOCK_M=block_m,
        BLOCK_N=min(config['block_n'], triton.next_power_of_2(keys_per_split)), SPLIT=split,
        USE_PDL=pdl, PREFETCH_KEYS=triton.next_power_of_2(keys_per_split) if prefetch else 0,
        LINE_ELEMENTS=line_elements, num_warps=config['num_warps'],
        num_stages=config['num_stages'], launch_pdl=pdl)
    if split:
        rows = config.get('merge_rows', 1)  # query rows per merge program
        _merge_splits_kernel[(triton.cdiv(n_queries, rows), batch)](
            part_o, part_m, part_l, out, n_queries, out.stride(0), out.stride(1),
            N_SPLITS=n_splits, HEAD_DIM=head_dim, ROWS=rows, USE_PDL=pdl,
            LAUNCH_FIRST=kernels.launch_first('merge'), num_warps=4,
            launch_pdl=pdl)
    return out


__all__ = ['attention', 'dense_mask', 'key_bias', 'self_attention']
