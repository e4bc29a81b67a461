# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The Triton kernels against float32 references.

On the CPU through Triton's interpreter (each check in triton_interpreter_checks.py, in a
subprocess: the interpreter is chosen when triton is imported); on the GPU at Pi0's full shapes.
"""
import dataclasses
import json
import os
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from pi0_ros.engine import attention, gemm, kernel_configs, kernels, model
from pi0_ros.engine.preprocess import (copy_frame_bytes, FrameResizer, FrameTable,
                                       resize_frames, scale_to_signed_unit, table_plan,
                                       table_words)

CHECKS = Path(__file__).with_name('triton_interpreter_checks.py')
AUDIT = Path(__file__).parents[1] / 'benchmarks' / 'register_audit.py'
skinny_linear = gemm.skinny_linear


@pytest.mark.skipif(kernels.triton is None, reason='Triton is not installed')
@pytest.mark.parametrize('check', ['skinny_linear', 'gelu_mul_gemm', 'action_linear',
                                   'fused_consumers_of_partial_sums', 'qkv_rope',
                                   'attention', 'self_attention', 'resize_frames',
                                   'frames_apart_resize_any_order_of_sizes', 'fp8_rows',
                                   'engine_triton_path_matches_pytorch_path',
                                   'engine_with_qkv_rope_matches_pytorch_path',
                                   'engine_frame_graph_keeps_encoded_frames_across_warmup',
                                   pytest.param('engine_guided_triton_path_matches_pytorch_path',
                                                marks=pytest.mark.slow)])
def test_kernel_in_the_interpreter(check):
    env = dict(os.environ, TRITON_INTERPRET='1', PI0_ROS_TRITON_ON_CPU='1')
    result = subprocess.run([sys.executable, str(CHECKS), check], env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f'{check} ok' in result.stdout


def _register_audit(tmp_path, *args) -> list:
    report = tmp_path / 'audit.json'
    result = subprocess.run([sys.executable, str(AUDIT), *args, '--out', str(report)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(report.read_text())['compilations']


def _over_budget(compilations) -> list:
    return [(c['kernel'], c['batches'], c['constexprs'], c['registers'], c['spill_store_bytes'],
             c['shared_bytes']) for c in compilations
            if c['spill_store_bytes'] or c['spill_load_bytes'] or c['shared_bytes'] > 232448]


@pytest.mark.skipif(kernels.triton is None, reason='Triton is not installed')
def test_no_kernel_the_engine_launches_on_hopper_spills_or_overflows_shared_memory(tmp_path):
    # Every Triton launch of a full-width engine at batch 1 and 8, compiled for sm_90a on the
    # CPU (benchmarks/register_audit.py). Registers spilled to local memory made session 17's
    # fused RoPE attention slower than the kernels it replaced; more shared memory than an SM
    # has fails at launch. Either fails here, before a GPU run.
    compilations = _register_audit(tmp_path, '--batches', '1,8')
    assert {'_skinny_linear_kernel', '_attention_kernel', '_merge_splits_kernel',
            '_add_norm_kernel', '_rope_qkv_kernel', '_self_attention_kernel',
            '_gelu_mul_kernel', '_resize_frames_kernel'} <= {c['kernel'] for c in compilations}
    assert {1, 8} <= {batch for c in compilations for batch in c['batches']}
    assert not _over_budget(compilations)


@pytest.mark.skipif(kernels.triton is None, reason='Triton is not installed')
def test_register_audit_reports_a_tile_too_large_for_the_registers(tmp_path):
    # 128 rows x 128 keys on 4 warps: the float32 output tile alone is 256 registers a thread.
    tuned = tmp_path / 'tiles.json'
    tuned.write_text(json.dumps({'best': {'SKINNY_LINEAR': [], 'ATTENTION': {'suffix': [[1, {
        'block_m': 128, 'block_n': 128, 'keys_per_split': 256, 'num_warps': 4,
        'num_stages': 2, 'merge_rows': 1}]]}}}))
    compilations = _register_audit(tmp_path, '--batches', '1', '--tuned', str(tuned))
    [(kernel, _, constexprs, registers, spilled, shared)] = _over_budget(compilations)
    assert kernel == '_attention_kernel' and constexprs['BLOCK_M'] == 128
    assert registers == 255 and spilled > 0 and shared > 232448


EXPERT_SHAPES = [(2560, 1024, False), (1024, 2048, False), (4096, 1024, True),
                 (1024, 4096, False)]


@pytest.mark.skipif(kernels.triton is None, reason='Triton is not installed')
def test_suffix_attention_prefetches_keys_only_for_split_launches_with_pdl(monkeypatch):
    launches = []

    class Recorder:  # stands for a Triton kernel: kernel[grid](*args, **kwargs)
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append(kwargs)

    monkeypatch.setattr(attention, '_attention_kernel', Recorder())
    monkeypatch.setattr(attention, '_merge_splits_kernel', Recorder())
    monkeypatch.setattr(attention, 'use_kernel', lambda queries: True)
    pdl = {'on': True}
    monkeypatch.setattr(kernels, 'use_pdl', lambda tensor: pdl['on'])

    def prefetched_keys(batch=1, rows=408, shape='suffix'):
        launches.clear()
        queries = torch.zeros(batch, rows, 256, dtype=torch.bfloat16)
        keys = torch.zeros(batch, 867, 256, dtype=torch.bfloat16)
        attention.attention(queries, keys, keys, torch.zeros(batch, 867), 0.0625, shape=shape)
        return launches[0]['PREFETCH_KEYS']

    split = kernel_configs.attention_config('suffix', 1)['keys_per_split']
    assert prefetched_keys() == split  # the committed default: batches up to 8
    assert prefetched_keys(batch=8) > 0
    assert prefetched_keys(rows=816 * 8, shape='prefix') == 0  # one pass over the keys
    monkeypatch.setattr(kernel_configs, 'SUFFIX_KV_PREFETCH_MAX_BATCH', 1)
    assert prefetched_keys(batch=8) == 0
    monkeypatch.setattr(kernel_configs, 'SUFFIX_KV_PREFETCH_MAX_BATCH', 0)
    assert prefetched_keys() == 0
    monkeypatch.setattr(kernel_configs, 'SUFFIX_KV_PREFETCH_MAX_BATCH', 8)
    pdl['on'] = False  # without PDL there is no wait to get ahead of
    assert prefetched_keys() == 0


def test_short_kernels_launch_the_next_first_only_where_named(monkeypatch):
    assert kernels.launch_first('norm') and not kernels.launch_first('merge')  # committed
    monkeypatch.setattr(kernel_configs, 'PDL_LAUNCH_FIRST', 'rope,merge')
    assert [kernels.launch_first(k) for k in ('norm', 'rope', 'merge')] == [False, True, True]
    for none in ('', None):
        monkeypatch.setattr(kernel_configs, 'PDL_LAUNCH_FIRST', none)
        assert not any(kernels.launch_first(k) for k in ('norm', 'rope', 'merge'))


def test_bench_kernel_config_sets_switches_numbers_and_names(monkeypatch):
    from pi0_ros.tools.bench import apply_kernel_config

    monkeypatch.setattr(kernel_configs, 'PREFETCH_WEIGHTS_MAX_ROWS', 64)
    monkeypatch.setattr(kernel_configs, 'PDL', True)
    monkeypatch.setattr(kernel_configs, 'BLAS_LIBRARY', 'cublaslt')
    apply_kernel_config('PREFETCH_WEIGHTS_MAX_ROWS=0')
    apply_kernel_config('PDL=0')
    apply_kernel_config('BLAS_LIBRARY=none')
    assert kernel_configs.BLAS_LIBRARY is None
    apply_kernel_config('BLAS_LIBRARY=cublas')
    assert kernel_configs.BLAS_LIBRARY == 'cublas'
    assert kernel_configs.PREFETCH_WEIGHTS_MAX_ROWS == 0 and kernel_configs.PDL is False
    for bad in ('NOT_A_SETTING=1', 'ATTENTION=1', 'ATTENTION.suffix=1', 'PDL.x=1'):
        with pytest.raises(SystemExit):
            apply_kernel_config(bad)


def test_preferred_blas_applies_only_to_half_precision_cuda_work_and_is_restored(monkeypatch):
    monkeypatch.setattr(kernel_configs, 'BLAS_LIBRARY', 'cublaslt')
    default = torch.backends.cuda.preferred_blas_library()
    assert default != torch._C._BlasBackend.Cublaslt  # PyTorch's default is cuBLAS
    cuda = torch.device('cuda')
    with gemm.preferred_blas(cuda, torch.bfloat16):
        assert torch.backends.cuda.preferred_blas_library() == torch._C._BlasBackend.Cublaslt
    assert torch.backends.cuda.preferred_blas_library() == default
    with pytest.raises(RuntimeError):
        with gemm.preferred_blas(cuda, torch.float16):
            raise RuntimeError('a stage failed')
    assert torch.backends.cuda.preferred_blas_library() == default
    for device, dtype in ((cuda, torch.float32), (torch.device('cpu'), torch.bfloat16)):
        with gemm.preferred_blas(device, dtype):
            assert torch.backends.cuda.preferred_blas_library() == default
    monkeypatch.setattr(kernel_configs, 'BLAS_LIBRARY', None)
    with gemm.preferred_blas(cuda, torch.bfloat16):
        assert torch.backends.cuda.preferred_blas_library() == default


@pytest.mark.gpu
@pytest.mark.parametrize('pdl', [True, False])
@pytest.mark.parametrize('rows', [51, 408])
@pytest.mark.parametrize('n_out,depth,gelu_mul', EXPERT_SHAPES)
def test_skinny_linear_on_the_gpu_at_full_size(rows, n_out, depth, gelu_mul, pdl, monkeypatch):
    monkeypatch.setattr(kernel_configs, 'PDL', pdl)  # with it: weight prefetch + PDL launch
    monkeypatch.setattr(kernel_configs, 'PREFETCH_WEIGHTS_MAX_ROWS', 1024 if pdl else 0)
    torch.manual_seed(0)
    x = torch.randn(rows, depth, dtype=torch.bfloat16, device='cuda')
    weight = torch.randn(2 * n_out if gelu_mul else n_out, depth, dtype=torch.bfloat16,
                         device='cuda') * 0.03
    product = x.float() @ weight.float().T
    expected = (F.gelu(product[:, :n_out], approximate='tanh') * product[:, n_out:]
                if gelu_mul else product)
    for config in (None, gemm.heuristic_config(rows, n_out, depth, gelu_mul)):
        out = kernels.sum_parts(gemm.skinny_linear(x, weight, gelu_mul=gelu_mul,
                                                   config=config)).float()
        error = (out - expected).abs().max().item() / expected.abs().max().item()
        assert error < 1e-2, (config, error)
        if not gelu_mul:  # the K splits added into a float32 stream with atomics
            stream = torch.randn(rows, n_out, device='cuda')
            added = stream.clone()
            gemm.skinny_linear(x, weight, config=config, out=added, atomic_add=True)
            error = (added - stream - expected).abs().max().item() / expected.abs().max().item()
            assert error < 1e-2, ('atomic', config, error)


@pytest.mark.gpu
@pytest.mark.parametrize('rows', [816, 6528])
def test_gelu_mul_gemm_on_the_gpu_at_the_prefix_shape(rows):
    torch.manual_seed(0)
    n_out, depth = 16384, 2048
    x = torch.randn(rows, depth, dtype=torch.bfloat16, device='cuda')
    weight = torch.randn(2 * n_out, depth, dtype=torch.bfloat16, device='cuda') * 0.03
    product = x.float() @ weight.float().T
    expected = F.gelu(product[:, :n_out], approximate='tanh') * product[:, n_out:]
    del product
    measured = [gemm.SkinnyConfig(**values) for max_rows, values in
                kernel_configs.GELU_MUL_GEMM.get((n_out, depth), ()) if values]
    for config in [gemm.SkinnyConfig(128, 128, 64, 1, 8, 3)] + measured:
        out = gemm.gelu_mul_gemm(x, weight, config).float()
        error = (out - expected).abs().max().item() / expected.abs().max().item()
        assert error < 1e-2, (config, error)


def test_fp8_weight_quantization_keeps_each_channel_within_fp8_rounding():
    torch.manual_seed(4)
    weight = torch.randn(64, 256) * torch.logspace(-3, 1, 64)[:, None]  # channels of all sizes
    fp8 = gemm.Fp8Weight.quantize(weight)
    assert fp8.data.dtype == torch.float8_e4m3fn and fp8.scale.shape == (64,)
    restored = fp8.dequantize(torch.float32)
    # e4m3 keeps 3 mantissa bits: relative error <= 2^-4 of each channel's absmax.
    error = (restored - weight).abs().amax(dim=1) / weight.abs().amax(dim=1)
    assert error.max().item() <= 2 ** -4
    assert torch.allclose(restored.abs().amax(dim=1), weight.abs().amax(dim=1), rtol=1e-6)


def tiny_bf16_engine_actions(seed: int, **options):
    """Build a tiny bf16 CPU engine with these options; return it and its actions for one input."""
    from pi0_ros.engine import Pi0Engine
    from pi0_ros.engine.config import EngineOptions, ModelDims

    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, (96, 128, 3), dtype=np.uint8) for _ in range(3)]
    noise = rng.standard_normal((50, 32)).astype(np.float32)
    engine = Pi0Engine.random(ModelDims.tiny(), state_dim=6, action_dim=6, num_cameras=3,
                              options=EngineOptions(device='cpu', precision='bf16',
                                                    max_frame_height=96, max_frame_width=128,
                                                    **options))
    actions = engine.infer(frames, np.zeros(6), 'pick', noise=noise).actions
    return engine, torch.from_numpy(actions).flatten().double()


def assert_close_but_not_equal(exact, quantized):
    assert F.cosine_similarity(exact, quantized, dim=0) > 0.999
    assert not torch.equal(exact, quantized)  # the quantized path ran


def test_fp8_row_quantization_scales_each_row_to_the_fp8_range():
    torch.manual_seed(7)
    x = torch.randn(6, 128) * torch.logspace(-2, 2, 6)[:, None]
    out = torch.empty(6, 128, dtype=torch.float8_e4m3fn)
    scale = torch.empty(6)
    reference = x.clone()
    kernels.add_rms_norm(x, None, out, 1e-6, out_scale=scale)
    normed = reference * torch.rsqrt(reference.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(scale, normed.abs().amax(-1) / kernels.FP8_MAX, rtol=1e-6)
    assert torch.equal(out.float().abs().amax(-1), torch.full((6,), kernels.FP8_MAX))
    restored = out.float() * scale[:, None]
    error = (restored - normed).abs().amax(-1) / normed.abs().amax(-1)
    assert error.max().item() <= 2 ** -4


def test_fp8_gelu_mul_rows_hold_the_product_within_fp8_rounding():
    torch.manual_seed(10)
    gate_up = torch.randn(5, 2 * 300) * torch.logspace(-1, 1, 5)[:, None]
    out = torch.empty(5, 300, dtype=torch.float8_e4m3fn)
    scale = torch.empty(5)
    kernels.gelu_mul(gate_up, out, out_scale=scale)
    product = F.gelu(gate_up[:, :300], approximate='tanh') * gate_up[:, 300:]
    assert torch.allclose(scale, product.abs().amax(-1) / kernels.FP8_MAX, rtol=1e-6)
    error = (out.float() * scale[:, None] - product).abs().amax(-1) / product.abs().amax(-1)
    assert error.max().item() <= 2 ** -4


def test_engine_with_fp8_prefix_mlp_stays_close_to_half_precision():
    outputs = []
    for fp8 in (False, True):
        engine, actions = tiny_bf16_engine_actions(8, prefix_fp8=fp8)
        prefix_kinds = {type(weight).__name__ for layer in engine.weights.prefix_layers
                        if layer.gate_up_w is not None
                        for weight in (layer.gate_up_w, layer.down_w)}
        expert_kinds = {type(layer.gate_up_w).__name__ for layer in engine.weights.expert_layers}
        assert prefix_kinds == ({'Fp8Weight'} if fp8 else {'Tensor'})
        assert expert_kinds == {'Tensor'}
        outputs.append(actions)
    assert_close_but_not_equal(*outputs)


def test_fp8_prefix_mlp_in_chosen_layers_only():
    from pi0_ros.engine import Pi0Engine
    from pi0_ros.engine.config import EngineOptions, ModelDims

    dims = dataclasses.replace(ModelDims.tiny(), prefix_depth=4, expert_depth=4)
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 256, (96, 128, 3), dtype=np.uint8) for _ in range(3)]
    noise = rng.standard_normal((50, 32)).astype(np.float32)
    outputs = {}
    for layers in ((), (1,), (0, 1, 2)):
        engine = Pi0Engine.random(dims, state_dim=6, action_dim=6, num_cameras=3,
                                  options=EngineOptions(device='cpu', precision='bf16',
                                                        max_frame_height=96, max_frame_width=128,
                                                        prefix_fp8=bool(layers),
                                                        prefix_fp8_layers=layers))
        kinds = [type(layer.gate_up_w).__name__ for layer in engine.weights.prefix_layers[:3]]
        assert kinds == ['Fp8Weight' if i in layers else 'Tensor' for i in range(3)]
        outputs[layers] = torch.from_numpy(
            engine.infer(frames, np.zeros(6), 'pick', noise=noise).actions).flatten().double()
    assert_close_but_not_equal(outputs[()], outputs[(1,)])
    assert not torch.equal(outputs[(1,)], outputs[(0, 1, 2)])
    with pytest.raises(ValueError, match='MLP layers 0..2'):  # layer 3 only writes K/V
        Pi0Engine.random(dims, state_dim=6, action_dim=6, num_cameras=3,
                         options=EngineOptions(device='cpu', prefix_fp8=True,
                                               prefix_fp8_layers=(3,)))
    for bad in ({'prefix_fp8_layers': (1,)}, {'prefix_fp8': True, 'prefix_fp8_layers': (2, 1)}):
        with pytest.raises(ValueError, match='prefix_fp8_layers'):
            EngineOptions(**bad)


@pytest.mark.gpu
@pytest.mark.parametrize('rows', [816, 6528])
def test_fp8_prefix_norm_and_gemm_on_the_gpu(rows):
    torch.manual_seed(9)
    x = torch.randn(rows, 2048, device='cuda')
    residual = torch.randn(rows, 2048, dtype=torch.bfloat16, device='cuda')
    expected_x = x + residual.float()
    x8 = torch.empty(rows, 2048, dtype=torch.float8_e4m3fn, device='cuda')
    scale = torch.empty(rows, device='cuda')
    kernels.add_rms_norm(x, residual, x8, 1e-6, out_scale=scale)
    assert torch.allclose(x, expected_x)
    reference8 = torch.empty_like(x8)
    reference_scale = torch.empty_like(scale)
    normed = expected_x * torch.rsqrt(expected_x.pow(2).mean(-1, keepdim=True) + 1e-6)
    kernels.quantize_rows(normed, reference8, reference_scale)
    assert torch.allclose(scale, reference_scale, rtol=1e-5)
    # The two may round a value on either side of an e4m3 step: one step apart at most.
    steps = (x8.float() - reference8.float()).abs() / reference8.float().abs().clamp(min=1)
    assert steps.max().item() <= 2 ** -3
    weight = gemm.Fp8Weight.quantize(torch.randn(2 * 4096, 2048, device='cuda') * 0.02)
    hidden = gemm.fp8_linear(x8, scale, weight, torch.bfloat16, gelu_mul=True)
    emulated = gemm.fp8_linear(x8.cpu(), scale.cpu(), gemm.Fp8Weight(weight.data.cpu(),
                               weight.scale.cpu()), torch.float32, gelu_mul=True)
    error = (hidden.float().cpu() - emulated).abs().max() / emulated.abs().max()
    assert error.item() < 1e-2
    # The down projection from FP8 rows of GELU * up (the FP8 prefix MLP's second product).
    hidden8, hidden_scale = gemm.fp8_linear(x8, scale, weight, torch.bfloat16, gelu_mul=True,
                                            fp8_out=True)
    assert hidden8.dtype == torch.float8_e4m3fn and hidden_scale.shape == (rows,)
    rows_max = emulated.abs().amax(-1, keepdim=True)
    dequantized = (hidden8.float() * hidden_scale[:, None]).cpu()
    assert ((dequantized - emulated).abs() / rows_max).max().item() <= 2 ** -3
    down = gemm.Fp8Weight.quantize(torch.randn(2048, 4096, device='cuda') * 0.02)
    out = gemm.fp8_linear(hidden8, hidden_scale, down, torch.bfloat16)
    expected = gemm.fp8_linear(hidden8.cpu(), hidden_scale.cpu(),
                               gemm.Fp8Weight(down.data.cpu(), down.scale.cpu()), torch.float32)
    assert ((out.float().cpu() - expected).abs().max() / expected.abs().max()).item() < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize('rows,depth,n_out,silu', [(50, 32, 1024, True), (50, 1024, 1024, False),
                                                   (408, 1024, 32, False)])
def test_action_linear_on_the_gpu_is_float32_exact(rows, depth, n_out, silu, monkeypatch):
    monkeypatch.setattr(kernel_configs, 'ACTION_LINEAR_TRITON', True)
    launches = []
    monkeypatch.setattr(gemm, 'skinny_linear',
                        lambda *a, **k: launches.append(1) or skinny_linear(*a, **k))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(3)
    x = torch.randn(1, rows, depth, device='cuda')
    weight = torch.randn(n_out, depth, device='cuda') * 0.05
    bias = torch.randn(n_out, device='cuda')
    expected = F.linear(x.double(), weight.double(), bias.double())
    expected = F.silu(expected) if silu else expected
    out = gemm.action_linear(x, weight, bias, silu=silu)
    assert launches  # the Triton kernel ran
    # TF32 would be off by ~1e-3 relative; full float32 is ~1e-6.
    assert (out.double() - expected).abs().max().item() < 1e-4 * expected.abs().max().item()


@pytest.mark.gpu
@pytest.mark.parametrize('kind', ['suffix', 'prefix'])
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_attention_on_the_gpu_at_full_size(kind, dtype):
    torch.manual_seed(1)
    batch, prefix, heads, dim = 2, 816, 8, 256
    suffix = 51 if kind == 'suffix' else 0
    rows = (suffix or prefix) * heads
    state_rows, state_keys = (heads, prefix + 1) if suffix else (0, 0)
    key_mask = torch.ones(batch, prefix, dtype=torch.bool, device='cuda')
    key_mask[1, 700:] = False
    bias = attention.key_bias(key_mask, extra_keys=suffix)
    q = torch.randn(batch, rows, dim, dtype=dtype, device='cuda')
    k = torch.randn(batch, prefix + suffix, dim, dtype=dtype, device='cuda')
    v = torch.randn(batch, prefix + suffix, dim, dtype=dtype, device='cuda')
    scale = dim ** -0.5
    mask = attention.dense_mask(bias, rows, state_rows, state_keys, torch.float32)
    reference = torch.softmax(q.float() @ k.float().transpose(1, 2) * scale + mask,
                              -1) @ v.float()
    out = attention.attention(q, k, v, bias, scale, state_rows, state_keys, shape=kind)
    assert (out.float() - reference).abs().max().item() < 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize('images', [1, 3])
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_vision_self_attention_on_the_gpu_at_the_siglip_shape(images, dtype, monkeypatch):
    monkeypatch.setattr(kernel_configs, 'VISION_ATTENTION_TRITON', True)
    torch.manual_seed(4)
    tokens, heads, dims = 256, 16, 72
    many = torch.zeros(24, tokens, 3 * heads * dims, dtype=dtype, device='cuda')
    assert attention.self_attention(many, heads, dims ** -0.5) is None  # batch 8: SDPA
    qkv = torch.randn(images, tokens, 3 * heads * dims, dtype=dtype, device='cuda')
    q, k, v = qkv.float().view(images, tokens, 3, heads, dims).permute(2, 0, 3, 1, 4)
    expected = F.scaled_dot_product_attention(q, k, v).transpose(1, 2) \
        .reshape(images * tokens, heads * dims)
    out = attention.self_attention(qkv, heads, dims ** -0.5)
    assert out.dtype == dtype and out.shape == expected.shape
    assert (out.float() - expected).abs().max().item() < 2e-2


def test_patch_embedding_is_the_strided_convolution():
    torch.manual_seed(3)
    pixels = torch.rand(2, 3, 56, 56) * 2 - 1
    kernel, bias = torch.randn(8, 3, 14, 14), torch.randn(8)
    positions = torch.randn(16, 8)
    expected = F.conv2d(pixels, kernel, bias, stride=14).flatten(2).transpose(1, 2) + positions
    out = model.embed_patches(pixels, kernel.flatten(1), bias, positions, 14)
    assert out.dtype == torch.float32 and out.shape == (2, 16, 8)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_frame_table_rows_take_a_new_plan_only_when_the_size_changes():
    table = FrameTable(np.zeros((2, table_words(32)), np.int32), 32)
    table.write(0, 48, 64, 10, 1, 2)
    np.testing.assert_array_equal(table.rows[0, 8:], table_plan(48, 64, 32))
    assert table.rows[0, :8].view(np.int64).tolist() == [10, 64, 1, 2]
    table.write(0, 60, 40, 5, 0, 1)  # another size: the row's plan is replaced
    np.testing.assert_array_equal(table.rows[0, 8:], table_plan(60, 40, 32))
    table.rows[0, 8:] = -1
    table.write(0, 60, 40, 9, 1, 0)  # the same size: only the header is written
    assert (table.rows[0, 8:] == -1).all()
    assert table.rows[0, :8].view(np.int64).tolist() == [9, 40, 1, 0]
    table.clear()
    assert not table.rows.any()
    table.write(0, 60, 40, 9, 1, 0)
    np.testing.assert_array_equal(table.rows[0, 8:], table_plan(60, 40, 32))


def test_frames_are_packed_back_to_back_whatever_their_layout():
    rng = np.random.default_rng(5)
    contiguous = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    contiguous.flags.writeable = False  # frames from ROS messages are read-only views
    strided = rng.integers(0, 256, (4, 10, 3), dtype=np.uint8)[:, ::2]
    out = np.full(200, 7, np.uint8)
    end = copy_frame_bytes(contiguous, out, memoryview(out), 3)
    end = copy_frame_bytes(strided, out, memoryview(out), end)
    assert end == 3 + 2 * 60
    np.testing.assert_array_equal(out[3:63], contiguous.reshape(-1))
    np.testing.assert_array_equal(out[63:123], strided.reshape(-1))
    assert (out[:3] == 7).all() and (out[123:] == 7).all()


@pytest.mark.gpu
def test_resize_frames_on_the_gpu_equals_the_pytorch_path():
    rng = np.random.default_rng(2)
    sizes = [(480, 640), (720, 1280), (480, 640)]
    table = FrameTable(np.zeros((3, table_words(224)), np.int32), 224)
    frames = torch.zeros(sum(h * w * 3 for h, w in sizes), dtype=torch.uint8)
    expected = torch.empty(3, 3, 224, 224)
    cpu = FrameResizer(720, 1280, 224, torch.device('cpu'))
    offset = 0
    for index, (height, width) in enumerate(sizes):
        image = torch.from_numpy(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        frames[offset:offset + image.numel()] = image.reshape(-1)
        cpu.resize_into(image, expected[index])
        table.write(index, height, width, offset, 0, index)
        offset += image.numel()
    scale_to_signed_unit(expected)
    out = torch.empty(3, 3, 224, 224, device='cuda')
    resize_frames(frames.cuda(), torch.from_numpy(table.rows).cuda(), out)
    assert (out.cpu() - expected).abs().max().item() < 1e-4
