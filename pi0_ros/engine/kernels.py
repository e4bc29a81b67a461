# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Fused elementwise kernels of the Gemma layers (Triton on CUDA, PyTorch elsewhere).

The Gemma stacks are launch-bound at batch 1 (the action expert runs 18 layers x 10 steps
over 51 tokens), so each layer's elementwise work is fused into three kernels:
  add_rms_norm   x += residual (float32 stream), out = x * rsqrt(mean(x^2) + eps)
                 (add_layer_norm: the same with the mean removed, for SigLIP)
  rope_qkv       split fused QKV, rotate Q and K (rotate-half RoPE), write K/V into the cache
  gelu_mul       gelu_tanh(gate) * up
Every kernel computes in float32 and rounds once on store. The PyTorch versions are the
reference the CPU path uses (and that the GPU tests compare against).
"""
import torch
import torch.nn.functional as F  # noqa: N812

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU-only installs
    triton = None


def use_triton(tensor: torch.Tensor) -> bool:
    """Tell whether the Triton kernels run: CUDA tensors with Triton installed."""
    return triton is not None and tensor.is_cuda


if triton is not None:
    @triton.jit
    def _add_norm_kernel(x_ptr, residual_ptr, out_ptr, n_cols, eps,
                         HAS_RESIDUAL: tl.constexpr, CENTER: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        inside = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=inside, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            x += tl.load(residual_ptr + row * n_cols + cols, mask=inside,
                         other=0.0).to(tl.float32)
            tl.store(x_ptr + row * n_cols + cols, x, mask=inside)
        if CENTER:
            x = tl.where(inside, x - tl.sum(x, axis=0) / n_cols, 0.0)
        y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=inside)

    @triton.jit
    def _rotate(x1, x2, cos, sin):
        return x1 * cos - x2 * sin, x2 * cos + x1 * sin

    @triton.jit
    def _rope_qkv_kernel(qkv_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr, seq,
                         k_stride_b, k_stride_s, v_stride_b, v_stride_s,
                         HEADS: tl.constexpr, HEADS_P2: tl.constexpr, HALF: tl.constexpr,
                         HALF_P2: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        batch = row // seq
        pos = row % seq
        head_dim = 2 * HALF
        width = (HEADS + 2) * head_dim
        j = tl.arange(0, HALF_P2)
        j_in = j < HALF
        cos = tl.load(cos_ptr + row * HALF + j, mask=j_in, other=0.0)
        sin = tl.load(sin_ptr + row * HALF + j, mask=j_in, other=0.0)
        base = qkv_ptr + row * width
        if HEADS > 0:
            h = tl.arange(0, HEADS_P2)[:, None]
            inside = (h < HEADS) & j_in[None, :]
            offsets = h * head_dim + j[None, :]
            x1 = tl.load(base + offsets, mask=inside, other=0.0).to(tl.float32)
            x2 = tl.load(base + offsets + HALF, mask=inside, other=0.0).to(tl.float32)
            o1, o2 = _rotate(x1, x2, cos[None, :], sin[None, :])
            q_row = q_ptr + row * (HEADS * head_dim)
            tl.store(q_row + offsets, o1.to(q_ptr.dtype.element_ty), mask=inside)
            tl.store(q_row + offsets + HALF, o2.to(q_ptr.dtype.element_ty), mask=inside)
        k_base = base + HEADS * head_dim
        k1 = tl.load(k_base + j, mask=j_in, other=0.0).to(tl.float32)
        k2 = tl.load(k_base + HALF + j, mask=j_in, other=0.0).to(tl.float32)
        r1, r2 = _rotate(k1, k2, cos, sin)
        k_row = k_ptr + batch * k_stride_b + pos * k_stride_s
        tl.store(k_row + j, r1.to(k_ptr.dtype.element_ty), mask=j_in)
        tl.store(k_row + HALF + j, r2.to(k_ptr.dtype.element_ty), mask=j_in)
        v_base = k_base + head_dim
        v_row = v_ptr + batch * v_stride_b + pos * v_stride_s
        v1 = tl.load(v_base + j, mask=j_in, other=0.0)
        v2 = tl.load(v_base + HALF + j, mask=j_in, other=0.0)
        tl.store(v_row + j, v1.to(v_ptr.dtype.element_ty), mask=j_in)
        tl.store(v_row + HALF + j, v2.to(v_ptr.dtype.element_ty), mask=j_in)

    @triton.jit
    def _gelu_mul_kernel(gate_up_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = cols < n_cols
        gate = tl.load(gate_up_ptr + row * 2 * n_cols + cols, mask=inside,
                       other=0.0).to(tl.float32)
        up = tl.load(gate_up_ptr + row * 2 * n_cols + n_cols + cols, mask=inside,
                     other=0.0).to(tl.float32)
        inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        tanh = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
        y = 0.5 * gate * (1.0 + tanh) * up
        tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=inside)


if triton is not None:
    @triton.jit
    def _split_attention_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, part_o_ptr, part_m_ptr,
                                part_l_ptr, n_queries, n_keys, keys_per_split, scale,
                                stride_qb, stride_qm, stride_kb, stride_kn, stride_vb, stride_vn,
                                stride_mb, stride_mm, HEAD_DIM: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        # One program: BLOCK_M query rows against one split of the keys (online softmax).
        block_m, split, batch = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        n_splits = tl.num_programs(1)
        rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        row_ok = rows < n_queries
        q = tl.load(q_ptr + batch * stride_qb + rows[:, None] * stride_qm + dims[None, :],
                    mask=row_ok[:, None], other=0.0)
        m_i = tl.full([BLOCK_M], float('-inf'), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        start = split * keys_per_split
        stop = tl.minimum(start + keys_per_split, n_keys)
        for key_start in range(start, stop, BLOCK_N):
            keys = key_start + tl.arange(0, BLOCK_N)
            key_ok = keys < stop
            k = tl.load(k_ptr + batch * stride_kb + keys[:, None] * stride_kn + dims[None, :],
                        mask=key_ok[:, None], other=0.0)
            scores = tl.dot(q, tl.trans(k)) * scale
            bias = tl.load(mask_ptr + batch * stride_mb + rows[:, None] * stride_mm
                           + keys[None, :], mask=row_ok[:, None] & key_ok[None, :],
                           other=float('-inf')).to(tl.float32)
            scores = scores + bias
            m_new = tl.maximum(m_i, tl.max(scores, 1))
            # Rows whose keys so far are all masked keep a finite reference (no inf - inf).
            m_ref = tl.where(m_new == float('-inf'), 0.0, m_new)
            alpha = tl.exp(m_i - m_ref)
            p = tl.exp(scores - m_ref[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + batch * stride_vb + keys[:, None] * stride_vn + dims[None, :],
                        mask=key_ok[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        part = (batch * n_splits + split) * n_queries + rows
        tl.store(part_o_ptr + part[:, None] * HEAD_DIM + dims[None, :], acc,
                 mask=row_ok[:, None])
        tl.store(part_m_ptr + part, m_i, mask=row_ok)
        tl.store(part_l_ptr + part, l_i, mask=row_ok)

    @triton.jit
    def _combine_splits_kernel(part_o_ptr, part_m_ptr, part_l_ptr, out_ptr, n_queries,
                               stride_ob, stride_om, N_SPLITS: tl.constexpr,
                               HEAD_DIM: tl.constexpr):
        row, batch = tl.program_id(0), tl.program_id(1)
        dims = tl.arange(0, HEAD_DIM)
        base = batch * N_SPLITS * n_queries + row
        m_max = float('-inf')
        for split in tl.static_range(N_SPLITS):
            m_max = tl.maximum(m_max, tl.load(part_m_ptr + base + split * n_queries))
        total = 0.0
        acc = tl.zeros([HEAD_DIM], tl.float32)
        for split in tl.static_range(N_SPLITS):
            index = base + split * n_queries
            weight = tl.exp(tl.load(part_m_ptr + index) - m_max)
            total += tl.load(part_l_ptr + index) * weight
            acc += tl.load(part_o_ptr + index * HEAD_DIM + dims) * weight
        tl.store(out_ptr + batch * stride_ob + row * stride_om + dims,
                 (acc / total).to(out_ptr.dtype.element_ty))


# Launch configuration of split_attention (benchmarks/tune_split_attention.py measures them).
SPLIT_ATTENTION_CONFIG = {'block_m': 16, 'keys_per_split': 256, 'num_warps': 8}


def split_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    mask: torch.Tensor, scale: float, keys_per_split: int = None) -> torch.Tensor:
    """
    Masked attention of few queries [b,M,D] over one KV head [b,L,D] (Triton, CUDA only).

    Flash-decoding: the keys are split across programs so that a handful of query rows still
    fill the GPU; each program keeps a float32 online softmax, a second kernel merges the
    splits. mask [b,M,L] is additive (0 / -inf). Every query row must see at least one key.
    """
    config = SPLIT_ATTENTION_CONFIG
    keys_per_split = keys_per_split or config['keys_per_split']
    batch, n_queries, head_dim = queries.shape
    n_keys = keys.shape[1]
    n_splits = triton.cdiv(n_keys, keys_per_split)
    part_o = torch.empty(batch, n_splits, n_queries, head_dim, dtype=torch.float32,
                         device=queries.device)
    part_m = torch.empty(batch, n_splits, n_queries, dtype=torch.float32, device=queries.device)
    part_l = torch.empty_like(part_m)
    out = torch.empty_like(queries)
    block_m = config['block_m']
    _split_attention_kernel[(triton.cdiv(n_queries, block_m), n_splits, batch)](
        queries, keys, values, mask, part_o, part_m, part_l, n_queries, n_keys, keys_per_split,
        scale, queries.stride(0), queries.stride(1), keys.stride(0), keys.stride(1),
        values.stride(0), values.stride(1), mask.stride(0) if mask.shape[0] > 1 else 0,
        mask.stride(1) if mask.shape[1] > 1 else 0,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=min(64, keys_per_split),
        num_warps=config['num_warps'], num_stages=2)
    _combine_splits_kernel[(n_queries, batch)](
        part_o, part_m, part_l, out, n_queries, out.stride(0), out.stride(1),
        N_SPLITS=n_splits, HEAD_DIM=head_dim, num_warps=4)
    return out


def _launch_norm(x, residual, out, eps, center: bool) -> None:
    block = triton.next_power_of_2(x.shape[1])
    _add_norm_kernel[(x.shape[0],)](
        x, residual if residual is not None else x, out, x.shape[1], eps,
        HAS_RESIDUAL=residual is not None, CENTER=center, BLOCK=block,
        num_warps=4 if block <= 2048 else 8)


def add_rms_norm(x: torch.Tensor, residual, out: torch.Tensor, eps: float) -> None:
    """Add residual into x [M,N] float32 (if given), write RMS-normalized x into out."""
    if use_triton(x):
        _launch_norm(x, residual, out, eps, center=False)
        return
    if residual is not None:
        x.add_(residual)
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def add_layer_norm(x: torch.Tensor, residual, out: torch.Tensor, eps: float) -> None:
    """Like add_rms_norm, with LayerNorm (mean removed; affine folded elsewhere)."""
    if use_triton(x):
        _launch_norm(x, residual, out, eps, center=True)
        return
    if residual is not None:
        x.add_(residual)
    out.copy_(F.layer_norm(x, (x.shape[1],), eps=eps))


def rope_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, q_out, k_out: torch.Tensor,
             v_out: torch.Tensor, heads: int, head_dim: int) -> None:
    """
    Split fused qkv [b*S, (heads+2)*hd] (Q heads, one K head, one V head).

    cos/sin [b*S, hd/2] float32 per row; q_out [b*S, heads*hd] (None if heads == 0);
    k_out/v_out [b, S, hd] views into the KV cache (last dim contiguous).
    """
    batch, seq = k_out.shape[0], k_out.shape[1]
    half = head_dim // 2
    if use_triton(qkv):
        _rope_qkv_kernel[(batch * seq,)](
            qkv, cos, sin, q_out if q_out is not None else qkv, k_out, v_out, seq,
            k_out.stride(0), k_out.stride(1), v_out.stride(0), v_out.stride(1),
            HEADS=heads, HEADS_P2=max(triton.next_power_of_2(max(heads, 1)), 1), HALF=half,
            HALF_P2=triton.next_power_of_2(half), num_warps=4)
        return
    qkv = qkv.float()
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rotate(x):
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    if heads:
        q_out.view(-1, heads, head_dim).copy_(rotate(qkv[:, :heads * head_dim]
                                                     .view(-1, heads, head_dim)))
    k = rotate(qkv[:, None, heads * head_dim:(heads + 1) * head_dim])
    k_out.copy_(k.view(batch, seq, head_dim))
    v_out.copy_(qkv[:, (heads + 1) * head_dim:].view(batch, seq, head_dim))


def gelu_mul(gate_up: torch.Tensor, out: torch.Tensor) -> None:
    """Write gelu_tanh(gate_up[:, :F]) * gate_up[:, F:] into out [M,F]."""
    n_cols = out.shape[1]
    if use_triton(gate_up):
        block = 1024
        _gelu_mul_kernel[(gate_up.shape[0], triton.cdiv(n_cols, block))](
            gate_up, out, n_cols, BLOCK=block, num_warps=4)
        return
    gate, up = gate_up[:, :n_cols], gate_up[:, n_cols:]
    if gate_up.dtype == torch.float16:
        out.copy_(F.gelu(gate.float(), approximate='tanh') * up.float())
    else:
        out.copy_(F.gelu(gate, approximate='tanh') * up)
