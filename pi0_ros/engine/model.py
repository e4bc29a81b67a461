# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Pi0 forward passes over fused weights: SigLIP tower, Gemma prefix, action expert.

Numerics follow LeRobot 0.6.1's ``lerobot.policies.pi0`` (RMSNorm ``x * rsqrt(mean(x^2) + eps)
* (1 + w)``, tanh GELU, rotate-half RoPE, prefix-LM masking, Euler integration from t=1 to t=0).
Fusions that keep the function unchanged: Q/K/V and gate/up projections are concatenated, norm
scales (and LayerNorm biases) are folded into the projection that follows them, the action input
projection is folded into the action-time MLP, and the time embedding of each Euler step is
precomputed. In half precision the residual stream, every norm, RoPE, softmax and the small
action-side projections stay in float32; only the large matrix products run in half precision.
"""
from dataclasses import dataclass
import math

import torch
import torch.nn.functional as F  # noqa: N812

from pi0_ros.engine import gemm, kernel_configs, kernels
from pi0_ros.engine.attention import attention, dense_mask, key_bias, self_attention
from pi0_ros.engine.config import ModelDims


@dataclass
class VisionLayer:
    """One SigLIP encoder layer; LayerNorm affine parameters folded into qkv / fc1."""

    qkv_w: torch.Tensor
    qkv_b: torch.Tensor
    out_w: torch.Tensor
    out_b: torch.Tensor
    fc1_w: torch.Tensor
    fc1_b: torch.Tensor
    fc2_w: torch.Tensor
    fc2_b: torch.Tensor


@dataclass
class GemmaLayer:
    """
    One Gemma decoder layer; RMSNorm scales folded into qkv / gate_up (o/mlp None if unused).

    Each weight is a tensor [N, K] in the compute dtype; the MLP's may be a gemm.Fp8Weight
    (the FP8 prefix MLP, EngineOptions.prefix_fp8).
    """

    qkv_w: torch.Tensor
    out_w: 'torch.Tensor | None'
    gate_up_w: 'torch.Tensor | gemm.Fp8Weight | None'
    down_w: 'torch.Tensor | gemm.Fp8Weight | None'


@dataclass
class Pi0Weights:
    """All tensors the forward passes need, already fused, on one device."""

    patch_w: torch.Tensor  # [vision_width, 3 * patch * patch]: the conv kernel, (c, y, x)
    patch_b: torch.Tensor
    vision_pos: torch.Tensor
    vision_layers: list
    projector_w: torch.Tensor
    projector_b: torch.Tensor
    embed_tokens: torch.Tensor
    embed_scale: float
    prefix_layers: list
    expert_layers: list
    state_w: torch.Tensor
    state_b: torch.Tensor
    action_time_w: torch.Tensor
    step_bias: torch.Tensor
    action_mlp_out_w: torch.Tensor
    action_mlp_out_b: torch.Tensor
    action_out_w: torch.Tensor
    action_out_b: torch.Tensor
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def tensors(self):
        """Every tensor held (for memory accounting and tests)."""
        found = []
        for value in vars(self).values():
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif isinstance(value, list):
                for layer in value:
                    for item in vars(layer).values():
                        if isinstance(item, torch.Tensor):
                            found.append(item)
                        elif isinstance(item, gemm.Fp8Weight):
                            found.extend((item.data, item.scale))
        return found


@dataclass
class Guidance:
    """
    Real-Time Chunking guidance of the Euler steps (static buffers, filled per call).

    prev [b, chunk, A] float32: the previous chunk in the normalized action space, zero-padded;
    weights [b, chunk, 1] float32: its rows' weights (0 for an observation without guidance);
    guidance [b, num_steps] float32: each step's guidance weight; velocity [b, chunk, A]
    float32: scratch for the step's velocity. jacobian: correct with the vector-Jacobian
    product through the action expert (a backward pass per step) instead of the error alone.
    """

    prev: torch.Tensor
    weights: torch.Tensor
    guidance: torch.Tensor
    velocity: torch.Tensor
    jacobian: bool = False

    def rows(self, batch: int) -> 'Guidance':
        """Return the guidance of the first `batch` observations (views)."""
        return Guidance(self.prev[:batch], self.weights[:batch], self.guidance[:batch],
                        self.velocity[:batch], self.jacobian)


VISION_PREFIX = 'paligemma_with_expert.paligemma.model.vision_tower.vision_model.'
PROJECTOR_PREFIX = 'paligemma_with_expert.paligemma.model.multi_modal_projector.linear.'
LANGUAGE_PREFIX = 'paligemma_with_expert.paligemma.model.language_model.'
EXPERT_PREFIX = 'paligemma_with_expert.gemma_expert.model.'


def lerobot_parameter_shapes(dims: ModelDims) -> dict:
    """Shapes of every LeRobot PI0Pytorch parameter the engine uses (keys without 'model.')."""
    d = dims
    shapes = {}
    v = VISION_PREFIX
    shapes[v + 'embeddings.patch_embedding.weight'] = (d.vision_width, 3, d.patch_size,
                                                       d.patch_size)
    shapes[v + 'embeddings.patch_embedding.bias'] = (d.vision_width,)
    shapes[v + 'embeddings.position_embedding.weight'] = (d.tokens_per_image, d.vision_width)
    for i in range(d.vision_depth):
        p = f'{v}encoder.layers.{i}.'
        for name in ('q_proj', 'k_proj', 'v_proj', 'out_proj'):
            shapes[f'{p}self_attn.{name}.weight'] = (d.vision_width, d.vision_width)
            shapes[f'{p}self_attn.{name}.bias'] = (d.vision_width,)
        for name in ('layer_norm1', 'layer_norm2'):
            shapes[f'{p}{name}.weight'] = (d.vision_width,)
            shapes[f'{p}{name}.bias'] = (d.vision_width,)
        shapes[f'{p}mlp.fc1.weight'] = (d.vision_mlp_dim, d.vision_width)
        shapes[f'{p}mlp.fc1.bias'] = (d.vision_mlp_dim,)
        shapes[f'{p}mlp.fc2.weight'] = (d.vision_width, d.vision_mlp_dim)
        shapes[f'{p}mlp.fc2.bias'] = (d.vision_width,)
    shapes[v + 'post_layernorm.weight'] = (d.vision_width,)
    shapes[v + 'post_layernorm.bias'] = (d.vision_width,)
    shapes[PROJECTOR_PREFIX + 'weight'] = (d.prefix_width, d.vision_width)
    shapes[PROJECTOR_PREFIX + 'bias'] = (d.prefix_width,)
    shapes[LANGUAGE_PREFIX + 'embed_tokens.weight'] = (d.vocab_size, d.prefix_width)
    for prefix, width, mlp, heads in ((LANGUAGE_PREFIX, d.prefix_width, d.prefix_mlp_dim,
                                       d.prefix_heads),
                                      (EXPERT_PREFIX, d.expert_width, d.expert_mlp_dim,
                                       d.expert_heads)):
        for i in range(d.prefix_depth):
            p = f'{prefix}layers.{i}.'
            shapes[p + 'self_attn.q_proj.weight'] = (heads * d.head_dim, width)
            shapes[p + 'self_attn.k_proj.weight'] = (d.num_kv_heads * d.head_dim, width)
            shapes[p + 'self_attn.v_proj.weight'] = (d.num_kv_heads * d.head_dim, width)
            shapes[p + 'self_attn.o_proj.weight'] = (width, heads * d.head_dim)
            shapes[p + 'mlp.gate_proj.weight'] = (mlp, width)
            shapes[p + 'mlp.up_proj.weight'] = (mlp, width)
            shapes[p + 'mlp.down_proj.weight'] = (width, mlp)
            shapes[p + 'input_layernorm.weight'] = (width,)
            shapes[p + 'post_attention_layernorm.weight'] = (width,)
        shapes[prefix + 'norm.weight'] = (width,)
    we = d.expert_width
    shapes['state_proj.weight'] = (we, d.max_state_dim)
    shapes['state_proj.bias'] = (we,)
    shapes['action_in_proj.weight'] = (we, d.max_action_dim)
    shapes['action_in_proj.bias'] = (we,)
    shapes['action_time_mlp_in.weight'] = (we, 2 * we)
    shapes['action_time_mlp_in.bias'] = (we,)
    shapes['action_time_mlp_out.weight'] = (we, we)
    shapes['action_time_mlp_out.bias'] = (we,)
    shapes['action_out_proj.weight'] = (d.max_action_dim, we)
    shapes['action_out_proj.bias'] = (d.max_action_dim,)
    return shapes


def sinusoidal_time_embedding(time: torch.Tensor, dim: int, min_period: float,
                              max_period: float) -> torch.Tensor:
    """Sine-cosine embedding of scalar times, computed in float64 like openpi/LeRobot."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64)
    period = min_period * (max_period / min_period) ** fraction
    angle = (1.0 / period * 2 * math.pi)[None, :] * time[:, None]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)


def euler_times(num_steps: int) -> list:
    """Return the Euler step times t (1 -> 0) as float32 values, and the step dt."""
    dt = -1.0 / num_steps
    return [float(torch.tensor(1.0 + step * dt, dtype=torch.float32)) for step in
            range(num_steps)], dt


def rope_tables(dims: ModelDims, length: int, device) -> tuple:
    """
    cos/sin [length, head_dim / 2] (float32) for positions 0..length-1 (HF Gemma RoPE).

    HF builds cat(freqs, freqs); both halves are equal, so only one is kept.
    """
    hd = dims.head_dim
    inv_freq = 1.0 / (dims.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float()
                                          / hd))
    angle = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return angle.cos().to(device), angle.sin().to(device)


def build_weights(get, dims: ModelDims, dtype: torch.dtype, device: torch.device,
                  prefix_length: int, prefix_fp8: bool = False,
                  prefix_fp8_layers=()) -> Pi0Weights:
    """
    Fuse LeRobot-named float tensors (``get(key)`` -> tensor on device) into Pi0Weights.

    Fusion runs in float32 (float64 for the tiny action-side products) and casts once. With
    prefix_fp8, the prefix MLP's gate/up weights (and down, with kernel_configs.FP8_PREFIX_DOWN)
    are FP8 with per-channel scales, multiplied by FP8 activations (see _gemma_stack), in the
    layers prefix_fp8_layers (all if empty).
    """
    f32 = torch.float32

    def g(key):
        return get(key).to(device=device, dtype=f32)

    def cast(t):
        return t.to(dtype).contiguous()

    d = dims
    v = VISION_PREFIX
    # The embedding first: its float32 copy is the largest transient, best taken while the
    # device holds nothing else of ours.
    embed = cast(g(LANGUAGE_PREFIX + 'embed_tokens.weight'))
    vision_layers = []
    for i in range(d.vision_depth):
        p = f'{v}encoder.layers.{i}.'
        ln1_w, ln1_b = g(p + 'layer_norm1.weight'), g(p + 'layer_norm1.bias')
        qkv_w = torch.cat([g(f'{p}self_attn.{n}_proj.weight') for n in 'qkv'])
        qkv_b = torch.cat([g(f'{p}self_attn.{n}_proj.bias') for n in 'qkv'])
        ln2_w, ln2_b = g(p + 'layer_norm2.weight'), g(p + 'layer_norm2.bias')
        fc1_w, fc1_b = g(p + 'mlp.fc1.weight'), g(p + 'mlp.fc1.bias')
        vision_layers.append(VisionLayer(
            qkv_w=cast(qkv_w * ln1_w[None, :]), qkv_b=cast(qkv_b + qkv_w @ ln1_b),
            out_w=cast(g(p + 'self_attn.out_proj.weight')),
            out_b=cast(g(p + 'self_attn.out_proj.bias')),
            fc1_w=cast(fc1_w * ln2_w[None, :]), fc1_b=cast(fc1_b + fc1_w @ ln2_b),
            fc2_w=cast(g(p + 'mlp.fc2.weight')), fc2_b=cast(g(p + 'mlp.fc2.bias'))))
    post_w, post_b = g(v + 'post_layernorm.weight'), g(v + 'post_layernorm.bias')
    proj_w, proj_b = g(PROJECTOR_PREFIX + 'weight'), g(PROJECTOR_PREFIX + 'bias')

    def gemma_layers(prefix, keep_last_full, fp8_mlp_layers=()):
        layers = []
        for i in range(d.prefix_depth):
            p = f'{prefix}layers.{i}.'
            fp8_mlp = i in fp8_mlp_layers
            store_gate_up = gemm.Fp8Weight.quantize if fp8_mlp else cast
            store_down = (gemm.Fp8Weight.quantize if fp8_mlp and kernel_configs.FP8_PREFIX_DOWN
                          else cast)
            in_scale = 1.0 + g(p + 'input_layernorm.weight')
            last_kv_only = (i == d.prefix_depth - 1) and not keep_last_full
            names = 'kv' if last_kv_only else 'qkv'
            qkv_w = torch.cat([g(f'{p}self_attn.{n}_proj.weight') for n in names])
            if last_kv_only:
                # The prefix output of the last layer is never used: only its K/V matter.
                layers.append(GemmaLayer(cast(qkv_w * in_scale[None, :]), None, None, None))
                continue
            post_scale = 1.0 + g(p + 'post_attention_layernorm.weight')
            gate_up = torch.cat([g(p + 'mlp.gate_proj.weight'), g(p + 'mlp.up_proj.weight')])
            layers.append(GemmaLayer(
                qkv_w=cast(qkv_w * in_scale[None, :]),
                out_w=cast(g(p + 'self_attn.o_proj.weight')),
                gate_up_w=store_gate_up(gate_up * post_scale[None, :]),
                down_w=store_down(g(p + 'mlp.down_proj.weight'))))
        return layers

    prefix_layers = gemma_layers(
        LANGUAGE_PREFIX, keep_last_full=False,
        fp8_mlp_layers=(set(prefix_fp8_layers or range(d.prefix_depth)) if prefix_fp8
                        else ()))
    expert_layers = gemma_layers(EXPERT_PREFIX, keep_last_full=True)

    # Action side (float32, tiny): fold action_in_proj into the action half of action_time_mlp_in
    # and precompute the time half (+ biases) for each Euler step.
    f64 = torch.float64
    we = d.expert_width
    in_w = get('action_time_mlp_in.weight').to(device=device, dtype=f64)
    in_b = get('action_time_mlp_in.bias').to(device=device, dtype=f64)
    act_w = get('action_in_proj.weight').to(device=device, dtype=f64)
    act_b = get('action_in_proj.bias').to(device=device, dtype=f64)
    times, _ = euler_times(d.num_steps)
    time_emb = sinusoidal_time_embedding(torch.tensor(times, dtype=f32), we, d.min_period,
                                         d.max_period).to(f32).to(device=device, dtype=f64)
    step_bias = time_emb @ in_w[:, we:].T + (in_w[:, :we] @ act_b + in_b)[None, :]
    out_scale = 1.0 + g(EXPERT_PREFIX + 'norm.weight')
    rope_cos, rope_sin = rope_tables(d, prefix_length + d.chunk_size + 1, device)
    return Pi0Weights(
        patch_w=cast(g(v + 'embeddings.patch_embedding.weight').flatten(1)),
        patch_b=cast(g(v + 'embeddings.patch_embedding.bias')),
        vision_pos=g(v + 'embeddings.position_embedding.weight').contiguous(),
        vision_layers=vision_layers,
        projector_w=cast(proj_w * post_w[None, :]), projector_b=cast(proj_b + proj_w @ post_b),
        embed_tokens=embed,
        embed_scale=float(torch.tensor(d.prefix_width ** 0.5, dtype=f32).to(dtype)),
        prefix_layers=prefix_layers, expert_layers=expert_layers,
        state_w=g('state_proj.weight').contiguous(), state_b=g('state_proj.bias').contiguous(),
        action_time_w=(in_w[:, :we] @ act_w).to(f32).contiguous(),
        step_bias=step_bias.to(f32).contiguous(),
        action_mlp_out_w=g('action_time_mlp_out.weight').contiguous(),
        action_mlp_out_b=g('action_time_mlp_out.bias').contiguous(),
        action_out_w=(g('action_out_proj.weight') * out_scale[None, :]).contiguous(),
        action_out_b=g('action_out_proj.bias').contiguous(),
        rope_cos=rope_cos, rope_sin=rope_sin)


def linear_gelu_tanh(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """
    Return gelu_tanh(x @ weight^T + bias) for x [M, K].

    On CUDA one cuBLASLt call with the bias + GELU epilogue (cuBLASLt's GELU is the tanh
    approximation SigLIP uses); PyTorch's CPU version of that call uses the erf form, so the CPU
    runs the two steps.
    """
    if x.is_cuda:
        return torch._addmm_activation(bias, x, weight.t(), use_gelu=True)
    return F.gelu(F.linear(x, weight, bias), approximate='tanh')


def embed_patches(pixels: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                  positions: torch.Tensor, patch: int) -> torch.Tensor:
    """
    Return SigLIP's patch embeddings + positions, float32 [k, N, width], of pixels [k,3,S,S].

    The convolution (stride = kernel size) is one GEMM over the image cut into non-overlapping
    patches; weight [width, 3 * patch * patch] is its kernel flattened (c, y, x).
    """
    k, side = pixels.shape[0], pixels.shape[-1] // patch
    n = side * side
    patches = torch.empty(k, side, side, 3, patch, patch, dtype=weight.dtype,
                          device=pixels.device)
    patches.copy_(pixels.view(k, 3, side, patch, side, patch).permute(0, 2, 4, 1, 3, 5))
    embedded = F.linear(patches.view(k * n, -1), weight, bias)
    del patches
    return torch.add(positions, embedded.view(k, n, -1))  # float32, as the residual stream


def vision_forward(w: Pi0Weights, dims: ModelDims, pixels: torch.Tensor,
                   out: torch.Tensor) -> None:
    """Run SigLIP + projector: pixels [k,3,S,S] float32 in [-1,1] -> out [k,N,width]."""
    dtype = w.patch_w.dtype
    k = pixels.shape[0]
    width, heads = dims.vision_width, dims.vision_heads
    x = embed_patches(pixels, w.patch_w, w.patch_b, w.vision_pos, dims.patch_size)
    n = x.shape[1]
    stream = x.view(k * n, width)
    normed = torch.empty(k * n, width, dtype=dtype, device=x.device)
    pending = None
    for layer in w.vision_layers:
        kernels.add_layer_norm(stream, pending, normed, dims.layer_norm_eps)
        del pending
        qkv = F.linear(normed, layer.qkv_w, layer.qkv_b).view(k, n, 3 * width)
        a = self_attention(qkv, heads, (width // heads) ** -0.5)
        if a is None:
            q, key, val = qkv.view(k, n, 3, heads, width // heads).permute(2, 0, 3, 1, 4) \
                .unbind(0)
            a = F.scaled_dot_product_attention(q, key, val).transpose(1, 2).reshape(k * n,
                                                                                    width)
            del q, key, val
        del qkv
        kernels.add_layer_norm(stream, F.linear(a, layer.out_w, layer.out_b), normed,
                               dims.layer_norm_eps)
        del a
        hidden = linear_gelu_tanh(normed, layer.fc1_w, layer.fc1_b)
        pending = F.linear(hidden, layer.fc2_w, layer.fc2_b)
        del hidden
    kernels.add_layer_norm(stream, pending, normed, dims.layer_norm_eps)
    out.copy_(F.linear(normed, w.projector_w, w.projector_b).view(k, n, -1))


def _fp8_mlp(layer, x8: torch.Tensor, x_scale: torch.Tensor, dtype: torch.dtype):
    """Run the MLP of a layer with FP8 gate/up weights on FP8 rows x8 with row scales."""
    if isinstance(layer.down_w, gemm.Fp8Weight):
        hidden8, hidden_scale = gemm.fp8_linear(x8, x_scale, layer.gate_up_w, dtype,
                                                gelu_mul=True, fp8_out=True)
        return gemm.fp8_linear(hidden8, hidden_scale, layer.down_w, dtype)
    return gemm.linear(gemm.fp8_linear(x8, x_scale, layer.gate_up_w, dtype, gelu_mul=True),
                       layer.down_w)


def _gemma_stack(layers: list, dims: ModelDims, x: torch.Tensor, heads: int,
                 cos: torch.Tensor, sin: torch.Tensor, cache_k: torch.Tensor,
                 cache_v: torch.Tensor, start: int, bias: torch.Tensor, state_keys: int = 0,
                 final_out=None, fp8_mlp: bool = False, before_layer=None, after_kv=None):
    """
    Gemma decoder layers over x [b,S,W] float32 (updated in place: the residual stream).

    Each layer writes its post-RoPE K and V for positions start..start+S into the cache and
    attends over cache positions 0..start+S with the additive key bias [b, start+S]; with
    state_keys, the first token's queries see only keys before state_keys. A layer without
    out_w only writes K/V. If final_out is given, it receives the last residual add + RMS
    normalization. Projections go through gemm.linear, whose float32 partial sums the fused
    norm and RoPE kernels add up (o and down may add theirs into the stream with atomics).
    With fp8_mlp, in each layer whose gate/up weights are a gemm.Fp8Weight the post-attention
    norm writes FP8 rows with row scales and gate/up runs as FP8 x FP8 (and down too, from FP8
    rows of GELU * up, when its weights are FP8).
    before_layer(index) is called before each layer's work is queued, after_kv(index) once its
    K/V are queued for the cache (stream hooks: the overlapped first denoising step).
    """
    dtype = cache_k.dtype  # the compute dtype (weights may be FP8)
    b, seq, width = x.shape
    rows = b * seq
    hd = dims.head_dim
    stream = x.view(rows, width)
    normed = torch.empty(rows, width, dtype=dtype, device=x.device)
    queries = torch.empty(rows, heads * hd, dtype=dtype, device=x.device)
    if fp8_mlp:
        normed8 = torch.empty(rows, width, dtype=torch.float8_e4m3fn, device=x.device)
        row_scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    # Temporaries are released as soon as they are consumed (del): the peak of this stack is
    # the MLP's gate/up output plus its GELU product, which sets the memory a batch needs
    # (pi0_ros.engine.memory models exactly this).
    pending = None
    for index, layer in enumerate(layers):
        if before_layer is not None:
            before_layer(index)
        kernels.add_rms_norm(stream, pending, normed, dims.rms_norm_eps)
        del pending
        keys = cache_k[index, :b, 0, start:start + seq]
        values = cache_v[index, :b, 0, start:start + seq]
        if not gemm.qkv_rope(normed, layer.qkv_w, cos, sin,
                             None if layer.out_w is None else queries, keys, values, heads, hd):
            qkv = gemm.linear(normed, layer.qkv_w)
            kernels.rope_qkv(qkv, cos, sin, None if layer.out_w is None else queries, keys,
                             values, 0 if layer.out_w is None else heads, hd)
            del qkv
        if after_kv is not None:
            after_kv(index)
        if layer.out_w is None:
            return
        # One KV head: fold the query heads into the query sequence (row = token * heads + h).
        attended = attention(queries.view(b, seq * heads, hd),
                             cache_k[index, :b, 0, :start + seq],
                             cache_v[index, :b, 0, :start + seq], bias, hd ** -0.5,
                             state_rows=heads if state_keys else 0, state_keys=state_keys)
        projected = gemm.linear(attended.view(rows, heads * hd), layer.out_w, add_into=stream)
        del attended
        if fp8_mlp and isinstance(layer.gate_up_w, gemm.Fp8Weight):
            kernels.add_rms_norm(stream, projected, normed8, dims.rms_norm_eps,
                                 out_scale=row_scale)
            del projected
            pending = _fp8_mlp(layer, normed8, row_scale, dtype)
        else:
            kernels.add_rms_norm(stream, projected, normed, dims.rms_norm_eps)
            del projected
            hidden = gemm.linear(normed, layer.gate_up_w, gelu_mul=True)
            pending = gemm.linear(hidden, layer.down_w, add_into=stream)
            del hidden
    if final_out is not None:
        kernels.add_rms_norm(stream, pending, final_out.view(rows, width), dims.rms_norm_eps)
    elif pending is not None:
        stream.add_(kernels.sum_parts(pending))


def prefix_forward(w: Pi0Weights, dims: ModelDims, embeds: torch.Tensor,
                   key_mask: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
                   after_kv=None) -> None:
    """
    Gemma prefix over [images, language]: fills cache_k/v[:, :b, :, :P] (post-RoPE keys).

    embeds [b,P,W] compute dtype; key_mask [b,1,1,P] bool (True = real token). Every token
    attends to every real token (prefix-LM: the prefix block is bidirectional). after_kv(layer)
    is called once a layer's K/V are queued (e.g. to record a CUDA event).
    """
    b, length, _ = embeds.shape
    x = embeds.to(torch.float32, copy=True)
    cos = w.rope_cos[:length].repeat(b, 1)
    sin = w.rope_sin[:length].repeat(b, 1)
    _gemma_stack(w.prefix_layers, dims, x, dims.prefix_heads, cos, sin, cache_k, cache_v, 0,
                 key_bias(key_mask),
                 fp8_mlp=any(isinstance(layer.gate_up_w, gemm.Fp8Weight)
                             for layer in w.prefix_layers), after_kv=after_kv)


def denoise_forward(w: Pi0Weights, dims: ModelDims, noise: torch.Tensor, state: torch.Tensor,
                    prefix_valid: torch.Tensor, key_mask: torch.Tensor, cache_k: torch.Tensor,
                    cache_v: torch.Tensor, out: torch.Tensor, steps=None,
                    before_layer=None, guidance: 'Guidance | None' = None) -> None:
    """
    Euler integration of the action expert over the cached prefix; writes out [b,chunk,A].

    noise [b,chunk,A] float32 is where the integration starts: the noise for step 0, or the
    state after the steps before `steps` (default all, in order; a subset runs some of the
    Euler steps); state [b,max_state_dim] float32 (normalized, padded); prefix_valid [b] int64
    count of real prefix tokens (sets suffix RoPE positions). before_layer(index) is called
    before each expert layer's work is queued (see _gemma_stack). With guidance, each step's
    velocity is guided by Real-Time Chunking (see Guidance and engine/rtc.py); with
    guidance.jacobian the steps run expert_velocity under autograd (no before_layer).
    """
    if guidance is not None and guidance.jacobian:
        if before_layer is not None:
            raise ValueError('the Jacobian guidance does not run with per-layer hooks')
        # Autograd cannot save tensors made in inference mode: everything it records is made
        # here, from buffers allocated outside it.
        with torch.inference_mode(False), torch.no_grad():
            _denoise_with_jacobian(w, dims, noise, state, prefix_valid, key_mask, cache_k,
                                   cache_v, out, steps, guidance)
        return
    b = noise.shape[0]
    length = key_mask.shape[-1]
    suffix = dims.chunk_size + 1
    positions = prefix_valid[:, None] + torch.arange(suffix, device=noise.device)[None, :]
    cos = w.rope_cos[positions.view(-1)]
    sin = w.rope_sin[positions.view(-1)]
    # Suffix keys: the state token (sees the prefix and itself), then the action tokens.
    bias = key_bias(key_mask, extra_keys=suffix)
    state_token = F.linear(state, w.state_w, w.state_b)
    x = torch.empty(b, suffix, dims.expert_width, device=noise.device)  # the residual stream
    normed = torch.empty_like(x)
    times, dt = euler_times(dims.num_steps)
    steps = range(dims.num_steps) if steps is None else steps
    x_t = out  # integrated in place
    x_t.copy_(noise)
    for step in steps:
        act = gemm.action_linear(x_t, w.action_time_w, w.step_bias[step], silu=True)
        gemm.action_linear(act, w.action_mlp_out_w, w.action_mlp_out_b, out=x[:, 1:])
        x[:, 0].copy_(state_token)
        _gemma_stack(w.expert_layers, dims, x, dims.expert_heads, cos, sin, cache_k, cache_v,
                     length, bias, state_keys=length + 1, final_out=normed,
                     before_layer=before_layer)
        if guidance is None:
            # x_t += dt * velocity (the Euler step, in the projection's epilogue on the GPU)
            gemm.action_linear(normed[:, 1:], w.action_out_w, w.action_out_b, out=x_t,
                               accumulate_scale=dt)
            continue
        velocity = gemm.action_linear(normed[:, 1:], w.action_out_w, w.action_out_b,
                                      out=guidance.velocity)
        # Velocity taken as a constant of x_t: the correction is the weighted error itself.
        predicted = x_t - times[step] * velocity
        correction = (guidance.prev - predicted) * guidance.weights
        _guided_euler_step(x_t, velocity, correction, guidance, step, dt)


def _guided_euler_step(x_t: torch.Tensor, velocity: torch.Tensor, correction: torch.Tensor,
                       guidance: 'Guidance', step: int, dt: float) -> None:
    """x_t += dt * (velocity - guidance weight of the step * correction), per observation."""
    weight = guidance.guidance[:, step].view(-1, 1, 1)
    x_t.copy_(x_t + dt * (velocity - weight * correction))


def _rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def expert_velocity(w: Pi0Weights, dims: ModelDims, x_t: torch.Tensor, step: int,
                    state_token: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    cache_k: torch.Tensor, cache_v: torch.Tensor, length: int,
                    mask: torch.Tensor) -> torch.Tensor:
    """
    Return the velocity [b, chunk, A] of Euler step `step` at x_t, differentiable in x_t.

    The same function as one step of denoise_forward, in PyTorch operations that autograd
    can differentiate (no fused kernels, no in-place writes): the suffix's K/V are joined to
    the cached prefix K/V cache_k/v[layer, :b, 0, :length] (constants) instead of being
    written into the cache. The stream, norms, RoPE and softmax run in float32, the expert's
    projections in the compute dtype, as in _gemma_stack. cos/sin [b * (chunk + 1), hd / 2]
    per suffix row; mask [b, (chunk + 1) * heads, length + chunk + 1] additive float32.
    """
    dtype = cache_k.dtype
    b = x_t.shape[0]
    heads, hd, eps = dims.expert_heads, dims.head_dim, dims.rms_norm_eps
    seq = dims.chunk_size + 1
    act = F.silu(F.linear(x_t, w.action_time_w, w.step_bias[step]))
    tokens = F.linear(act, w.action_mlp_out_w, w.action_mlp_out_b)
    x = torch.cat([state_token[:, None, :], tokens], dim=1)  # the residual stream, float32
    cos, sin = cos.view(b, seq, 1, -1), sin.view(b, seq, 1, -1)
    for index, layer in enumerate(w.expert_layers):
        qkv = F.linear(_rms_normalize(x, eps).to(dtype), layer.qkv_w).float()
        queries = _rotate_half(qkv[..., :heads * hd].view(b, seq, heads, hd), cos, sin)
        keys = _rotate_half(qkv[..., heads * hd:(heads + 1) * hd].view(b, seq, 1, hd), cos,
                            sin)
        values = qkv[..., (heads + 1) * hd:]
        keys = torch.cat([cache_k[index, :b, 0, :length], keys.view(b, seq, hd).to(dtype)], 1)
        values = torch.cat([cache_v[index, :b, 0, :length], values.to(dtype)], 1)
        # One KV head: the query heads folded into the query sequence (row = token * heads + h).
        scores = torch.baddbmm(mask, queries.reshape(b, seq * heads, hd).to(dtype).float(),
                               keys.float().transpose(1, 2), alpha=hd ** -0.5)
        attended = torch.bmm(torch.softmax(scores, dim=-1).to(dtype), values)
        x = x + F.linear(attended.view(b, seq, heads * hd), layer.out_w).float()
        gate_up = F.linear(_rms_normalize(x, eps).to(dtype), layer.gate_up_w).float()
        gate, up = gate_up.chunk(2, dim=-1)
        hidden = (F.gelu(gate, approximate='tanh') * up).to(dtype)
        x = x + F.linear(hidden, layer.down_w).float()
    return F.linear(_rms_normalize(x[:, 1:], eps), w.action_out_w, w.action_out_b)


def _denoise_with_jacobian(w: Pi0Weights, dims: ModelDims, noise: torch.Tensor,
                           state: torch.Tensor, prefix_valid: torch.Tensor,
                           key_mask: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
                           out: torch.Tensor, steps, guidance: 'Guidance') -> None:
    """Run the guided Euler steps of denoise_forward with the vector-Jacobian correction."""
    length = key_mask.shape[-1]
    suffix = dims.chunk_size + 1
    positions = prefix_valid[:, None] + torch.arange(suffix, device=noise.device)[None, :]
    cos = w.rope_cos[positions.view(-1)]
    sin = w.rope_sin[positions.view(-1)]
    # The attention mask of the folded query rows: the state token's rows see the prefix and
    # the state token only.
    mask = dense_mask(key_bias(key_mask, extra_keys=suffix), suffix * dims.expert_heads,
                      dims.expert_heads, length + 1, torch.float32)
    state_token = F.linear(state, w.state_w, w.state_b)
    times, dt = euler_times(dims.num_steps)
    steps = range(dims.num_steps) if steps is None else steps
    x_t = out
    x_t.copy_(noise)
    for step in steps:
        point = x_t.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            velocity = expert_velocity(w, dims, point, step, state_token, cos, sin, cache_k,
                                       cache_v, length, mask)
            predicted = point - times[step] * velocity
        error = (guidance.prev - predicted.detach()) * guidance.weights
        # d predicted / d x_t applied to the error: error - t * J_v^T error.
        correction, = torch.autograd.grad(predicted, point, error)
        guidance.velocity.copy_(velocity.detach())
        _guided_euler_step(x_t, guidance.velocity, correction, guidance, step, dt)
