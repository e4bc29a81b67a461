# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Checks of the Triton kernels on the CPU, through Triton's interpreter.

Run by test_engine_kernels.py in a subprocess with TRITON_INTERPRET=1 (the interpreter must be
chosen before triton is imported): `python triton_interpreter_checks.py NAME` runs one check
and prints 'NAME ok'. Each compares a kernel with a float32 PyTorch reference.
"""
import dataclasses
import sys

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from pi0_ros.engine import gemm, kernel_configs, kernels
from pi0_ros.engine.attention import _launch, dense_mask, key_bias, self_attention
from pi0_ros.engine.preprocess import (FrameResizer, FrameTable, resize_frames,
                                       scale_to_signed_unit, table_words)


def close(actual, expected, tolerance, what):
    error = (actual.float() - expected.float()).abs().max().item()
    assert error < tolerance, f'{what}: max error {error} >= {tolerance}'


def check_skinny_linear():
    torch.manual_seed(0)
    for rows in (5, 51, 70):
        x = torch.randn(rows, 128, dtype=torch.float16)
        weight = (torch.randn(96, 128) * 0.1).half()
        reference = x.float() @ weight.float().T
        for split_k in (1, 2, 4):
            config = gemm.SkinnyConfig(block_m=16 if rows < 16 else 64, block_n=32,
                                       block_k=32, split_k=split_k)
            out = gemm.skinny_linear(x, weight, config=config)
            if split_k == 1:
                assert out.shape == (rows, 96) and out.dtype == torch.float16
            else:
                assert out.shape == (split_k, rows, 96) and out.dtype == torch.float32
            close(kernels.sum_parts(out), reference, 2e-2, f'linear rows={rows} split={split_k}')
            # atomic_add: every split adds its share into a float32 stream, nothing returned.
            stream = torch.randn(rows, 96)
            added = stream.clone()
            gemm.skinny_linear(x, weight, config=config, out=added, atomic_add=True)
            close(added, stream + reference, 2e-2, f'atomic rows={rows} split={split_k}')
        gate_up = (torch.randn(2 * 64, 128) * 0.1).half()
        product = x.float() @ gate_up.float().T
        expected = F.gelu(product[:, :64], approximate='tanh') * product[:, 64:]
        out = gemm.skinny_linear(x, gate_up, gelu_mul=True,
                                 config=gemm.SkinnyConfig(block_n=32, block_k=64))
        assert out.shape == (rows, 64)
        close(out, expected, 2e-2, f'gelu_mul rows={rows}')
    # A configuration that does not tile the shape is refused, not run.
    try:
        gemm.skinny_linear(x, weight, config=gemm.SkinnyConfig(block_n=64))
    except ValueError:
        pass
    else:
        raise AssertionError('a non-tiling configuration was accepted')


def check_gelu_mul_gemm():
    torch.manual_seed(3)
    n_out, depth = 64, 96
    weight = (torch.randn(2 * n_out, depth) * 0.1).half()
    config = gemm.SkinnyConfig(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)
    for rows in (70, 32):  # a partial last row block, then an exact one
        x = torch.randn(rows, depth, dtype=torch.float16)
        product = x.float() @ weight.float().T
        expected = F.gelu(product[:, :n_out], approximate='tanh') * product[:, n_out:]
        out = gemm.gelu_mul_gemm(x, weight, config)
        assert out.shape == (rows, n_out) and out.dtype == torch.float16
        close(out, expected, 2e-2, f'gelu_mul_gemm rows={rows}')
    # linear() takes it where a configuration is measured for the shape, not elsewhere (rows
    # beyond the skinny kernel's, as the prefix's).
    kernel_configs.SKINNY_LINEAR_MAX_ROWS = 0
    kernel_configs.GELU_MUL_GEMM = {(n_out, depth): [(64, None), (1024, vars(config))]}
    assert gemm.use_gelu_mul_gemm(x, weight) is None  # 32 rows: cuBLAS measured faster
    x = torch.randn(70, depth, dtype=torch.float16)
    assert gemm.use_gelu_mul_gemm(x, weight) == config
    launched = []
    fused = gemm.gelu_mul_gemm
    gemm.gelu_mul_gemm = lambda *args: launched.append(args[2]) or fused(*args)
    product = x.float() @ weight.float().T
    close(gemm.linear(x, weight, gelu_mul=True),
          F.gelu(product[:, :n_out], approximate='tanh') * product[:, n_out:], 2e-2,
          'linear through gelu_mul_gemm')
    assert launched == [config], launched
    gemm.gelu_mul_gemm = fused
    try:
        gemm.gelu_mul_gemm(x, weight, gemm.SkinnyConfig(block_n=48, block_k=32))
    except ValueError:
        pass
    else:
        raise AssertionError('a non-tiling configuration was accepted')


def check_action_linear():
    kernel_configs.ACTION_LINEAR_TRITON = True
    torch.manual_seed(5)
    for rows, depth, n_out, silu in ((50, 32, 1024, True), (50, 1024, 1024, False),
                                     (100, 1024, 32, False), (7, 64, 48, True)):
        x = torch.randn(rows, depth)
        weight = torch.randn(n_out, depth) * 0.05
        bias = torch.randn(n_out)
        expected = F.linear(x, weight, bias)
        expected = F.silu(expected) if silu else expected
        out = gemm.action_linear(x.view(1, rows, depth), weight, bias, silu=silu)
        assert out.shape == (1, rows, n_out) and out.dtype == torch.float32
        close(out[0], expected, 1e-4, f'action_linear {rows}x{depth}x{n_out}')
    # Views with a batch stride (rows 1.. of each observation), written in place and as the
    # Euler update out += scale * result.
    stream = torch.randn(3, 9, 64)
    weight, bias = torch.randn(32, 64) * 0.05, torch.randn(32)
    expected = F.linear(stream[:, 1:], weight, bias)
    target = torch.zeros(3, 9, 32)
    gemm.action_linear(stream[:, 1:], weight, bias, out=target[:, 1:])
    close(target[:, 1:], expected, 1e-4, 'action_linear into a strided view')
    assert target[:, 0].abs().max().item() == 0.0, 'rows outside the view were written'
    x_t = torch.randn(3, 8, 32)
    updated = x_t + (-0.1) * expected
    gemm.action_linear(stream[:, 1:], weight, bias, out=x_t, accumulate_scale=-0.1)
    close(x_t, updated, 1e-5, 'action_linear accumulate')


def check_fused_consumers_of_partial_sums():
    torch.manual_seed(1)
    rows, width, parts = 6, 48, 3
    stream = torch.randn(rows, width)
    partial = torch.randn(parts, rows, width)
    out = torch.empty(rows, width, dtype=torch.float16)
    expected_stream = stream + partial.sum(0)
    expected = expected_stream * torch.rsqrt(expected_stream.pow(2).mean(-1, keepdim=True)
                                             + 1e-6)
    kernels.add_rms_norm(stream, partial, out, 1e-6)
    close(stream, expected_stream, 1e-5, 'residual stream')
    close(out, expected, 2e-3, 'rms norm of partial sums')
    heads, head_dim, batch, seq = 2, 16, 2, 3
    qkv_parts = torch.randn(parts, batch * seq, (heads + 2) * head_dim)
    angle = torch.rand(batch * seq, head_dim // 2) * 6
    cos, sin = angle.cos(), angle.sin()
    results = []
    for qkv in (qkv_parts, qkv_parts.sum(0).half()):
        q = torch.empty(batch * seq, heads * head_dim, dtype=torch.float16)
        k = torch.empty(batch, seq, head_dim, dtype=torch.float16)
        v = torch.empty_like(k)
        kernels.rope_qkv(qkv, cos, sin, q, k, v, heads, head_dim)
        results.append((q, k, v))
    kernels.INTERPRET_ON_CPU = False  # the PyTorch path as the reference
    q = torch.empty(batch * seq, heads * head_dim)
    k = torch.empty(batch, seq, head_dim)
    v = torch.empty_like(k)
    kernels.rope_qkv(qkv_parts, cos, sin, q, k, v, heads, head_dim)
    for got in results:
        for actual, expected, name in zip(got, (q, k, v), 'qkv'):
            close(actual, expected, 1e-2, f'rope {name}')


def check_qkv_rope():
    """Check that the qkv projection with RoPE in one kernel writes what GEMM + rope_qkv do."""
    torch.manual_seed(4)
    heads, head_dim, batch, seq, width = 2, 32, 2, 5, 64
    rows = batch * seq
    x = torch.randn(rows, width, dtype=torch.float16)
    weight = (torch.randn((heads + 2) * head_dim, width) * 0.2).half()
    angle = torch.rand(rows, head_dim // 2) * 6
    cos, sin = angle.cos(), angle.sin()
    reference = x.float() @ weight.float().T

    def outputs(dtype):
        return (torch.empty(rows, heads * head_dim, dtype=dtype),
                torch.empty(batch, seq + 3, head_dim, dtype=dtype)[:, 2:2 + seq],
                torch.empty(batch, seq + 3, head_dim, dtype=dtype)[:, 1:1 + seq])
    kernel_configs.QKV_ROPE_CONFIG = dict(kernel_configs.QKV_ROPE_CONFIG, block_m=16, block_k=32)
    kernel_configs.QKV_ROPE_MAX_ROWS = 0
    assert not gemm.qkv_rope(x, weight, cos, sin, *outputs(torch.float16), heads, head_dim)
    kernel_configs.QKV_ROPE_MAX_ROWS = 64
    fused = outputs(torch.float16)
    assert gemm.qkv_rope(x, weight, cos, sin, *fused, heads, head_dim)
    assert not gemm.qkv_rope(x, weight, cos, sin, None, *fused[1:], heads, head_dim)
    kernels.INTERPRET_ON_CPU = False  # the PyTorch path as the reference
    expected = outputs(torch.float32)
    kernels.rope_qkv(reference, cos, sin, *expected, heads, head_dim)
    for actual, wanted, name in zip(fused, expected, 'qkv'):
        close(actual, wanted, 2e-2, f'qkv_rope {name}')


def check_attention():
    torch.manual_seed(2)
    for dtype, tolerance in ((torch.float16, 3e-3),):
        for batch, prefix, heads, seq in ((1, 70, 4, 9), (2, 130, 2, 5)):
            dim = 32
            length = prefix + seq
            key_mask = torch.ones(batch, prefix, dtype=torch.bool)
            key_mask[-1, prefix - 11:] = False  # padding of the last observation
            bias = key_bias(key_mask, extra_keys=seq)
            q = torch.randn(batch, seq * heads, dim, dtype=dtype)
            k_cache = torch.randn(batch, length + 5, dim, dtype=dtype)
            v_cache = torch.randn(batch, length + 5, dim, dtype=dtype)
            k, v = k_cache[:, :length], v_cache[:, :length]
            scale = dim ** -0.5
            mask = dense_mask(bias, seq * heads, heads, prefix + 1, torch.float32)
            assert mask[0, 0, prefix + 1].item() == float('-inf')  # state row, action key
            assert mask[0, heads, prefix + 1].item() == 0.0         # action row, action key
            reference = torch.softmax(q.float() @ k.float().transpose(1, 2) * scale + mask,
                                      -1) @ v.float()
            for config in ({'block_m': 16, 'block_n': 16, 'keys_per_split': 32},
                           {'block_m': 16, 'block_n': 16, 'keys_per_split': 32,
                            'merge_rows': 4},
                           {'block_m': 32, 'block_n': 32, 'keys_per_split': 0}):
                config = dict(config, num_warps=4, num_stages=2)
                out = _launch(q, k, v, bias, scale, heads, prefix + 1, config)
                assert out.dtype == dtype and out.shape == q.shape
                close(out, reference, tolerance, f'attention {batch} {prefix} {config}')


def check_self_attention():
    torch.manual_seed(4)
    kernel_configs.VISION_ATTENTION_TRITON = True
    for images, tokens, heads, dims in ((2, 20, 3, 24), (1, 33, 2, 16)):  # 24: padded to 32
        qkv = torch.randn(images, tokens, 3 * heads * dims, dtype=torch.float16)
        q, k, v = qkv.float().view(images, tokens, 3, heads, dims).permute(2, 0, 3, 1, 4)
        expected = F.scaled_dot_product_attention(q, k, v).transpose(1, 2) \
            .reshape(images * tokens, heads * dims)
        out = self_attention(qkv, heads, dims ** -0.5)
        assert out.dtype == torch.float16 and out.shape == expected.shape
        close(out, expected, 3e-3, f'self_attention {images} {tokens} {heads} {dims}')
    kernel_configs.VISION_ATTENTION_TRITON = False
    assert self_attention(qkv, 2, 0.25) is None  # switched off: the caller's SDPA
    # The vision tower with it (3 images) against the same tower through SDPA.
    from pi0_ros.engine import Pi0Engine, model
    from pi0_ros.engine.config import EngineOptions, ModelDims
    dims = ModelDims.tiny()
    weights = Pi0Engine.random(dims, state_dim=6, action_dim=6, num_cameras=3,
                               options=EngineOptions(device='cpu', precision='fp16')).weights
    for layer in weights.vision_layers:  # attention's share of the stream large enough to see
        layer.qkv_w.mul_(5.0)
        layer.out_w.mul_(10.0)
    pixels = torch.rand(3, 3, dims.image_size, dims.image_size) * 2 - 1
    outputs = []
    for triton_attention in (True, False):
        kernel_configs.VISION_ATTENTION_TRITON = triton_attention
        out = torch.empty(3, dims.tokens_per_image, dims.prefix_width, dtype=torch.float16)
        model.vision_forward(weights, dims, pixels, out)
        outputs.append(out.float())
    close(outputs[0], outputs[1], 2e-3 * outputs[1].abs().max().item(), 'vision tower')


def check_resize_frames():
    # Frames of three sizes back to back in one buffer, resized in one launch from their
    # table rows (FrameTable), against the PyTorch path frame by frame.
    rng = np.random.default_rng(3)
    resizer = FrameResizer(60, 80, 32, torch.device('cpu'))
    sizes = [(48, 64), (60, 40), (32, 32), (48, 64), (60, 40), (32, 32)]
    table = FrameTable(np.zeros((len(sizes) + 1, table_words(32)), np.int32), 32)
    frames = torch.zeros(sum(h * w * 3 for h, w in sizes) + 5, dtype=torch.uint8)
    expected = torch.empty(len(sizes), 3, 32, 32)
    offset = 5  # the frames need no alignment
    for index, (height, width) in enumerate(sizes):
        image = torch.from_numpy(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        frames[offset:offset + image.numel()] = image.reshape(-1)
        resizer.resize_into(image, expected[index])
        table.write(index + 1, height, width, offset, index // 3, index % 3)
        offset += image.numel()
    scale_to_signed_unit(expected)
    out = torch.full((len(sizes), 3, 32, 32), 7.0)
    resize_frames(frames, torch.from_numpy(table.rows)[1:], out)  # rows from the second on
    close(out, expected, 1e-5, 'resize of packed frames')
    header = table.rows[1:, :8].view(np.int64)
    assert header[:, 2].tolist() == [0, 0, 0, 1, 1, 1] and header[:, 3].tolist() == [0, 1, 2] * 2


def check_frames_apart_resize_any_order_of_sizes():
    """With frame_graph off: frames in their rows, sizes mixed in any order, one launch."""
    from pi0_ros.engine import Pi0Engine
    from pi0_ros.engine.config import EngineOptions, ModelDims

    dims = dataclasses.replace(ModelDims.tiny(), image_size=28)
    engine = Pi0Engine.random(dims, state_dim=6, action_dim=6, num_cameras=3,
                              options=EngineOptions(device='cpu', max_batch=2, frame_graph=False,
                                                    max_frame_height=60, max_frame_width=80))
    assert not engine._packed_frames
    rng = np.random.default_rng(8)
    sizes = [(48, 64), (60, 40), (48, 64), (32, 32)]
    resizer = FrameResizer(60, 80, 28, torch.device('cpu'))
    expected = torch.empty(len(sizes), 3, 28, 28)
    offset = 2  # rows 2.. of the device frames and of the table
    for index, (height, width) in enumerate(sizes):
        image = torch.from_numpy(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        engine._device_frames[offset + index, :image.numel()] = image.reshape(-1)
        resizer.resize_into(image, expected[index])
    scale_to_signed_unit(expected)
    engine._prepare_pixels(sizes, offset)
    close(engine._pixels[:len(sizes)], expected, 1e-5, 'frames apart, mixed sizes')


def check_fp8_rows():
    # FP8 rows with row scales from the norm and GELU * up kernels, against the PyTorch path.
    # The rows are written to float32 here: the interpreter's float32 -> e4m3 cast loses a
    # rounding carry into the exponent (-124 becomes -64), so the check stops before the cast,
    # which the GPU tests cover (test_fp8_prefix_norm_and_gemm_on_the_gpu).
    torch.manual_seed(9)
    x = torch.randn(10, 256) * torch.logspace(-1, 1, 10)[:, None]
    residual = torch.randn(10, 256).half()
    gate_up = (torch.randn(10, 2 * 2000) * 2).half()  # 2000 columns: two blocks, one partial
    results = []
    for interpret in (True, False):
        kernels.INTERPRET_ON_CPU = interpret
        stream = x.clone()
        normed, normed_scale = torch.empty(10, 256), torch.empty(10)
        kernels.add_rms_norm(stream, residual, normed, 1e-6, out_scale=normed_scale)
        hidden, hidden_scale = torch.empty(10, 2000), torch.empty(10)
        kernels.gelu_mul(gate_up, hidden, out_scale=hidden_scale)
        results.append((stream, normed, normed_scale, hidden, hidden_scale))
    kernels.INTERPRET_ON_CPU = True
    for name, actual, expected in zip(('stream', 'normed rows', 'normed scales',
                                       'gelu*up rows', 'gelu*up scales'), *results):
        close(actual, expected, 1e-3 * max(1.0, expected.abs().max().item()), f'fp8 {name}')
    assert results[0][1].abs().amax(-1).sub(kernels.FP8_MAX).abs().max() < 1e-3
    assert results[0][3].abs().amax(-1).sub(kernels.FP8_MAX).abs().max() < 1e-3


def _triton_and_pytorch_actions(dims, frames, rtc=None) -> tuple:
    """
    Actions of two observations from the Triton path (interpreter) and the PyTorch path.

    rtc: infer_batch's Real-Time Chunking requests (each result must say it was guided).
    """
    from pi0_ros.engine import Pi0Engine
    from pi0_ros.engine.config import EngineOptions

    noise = np.random.default_rng(4).standard_normal((50, 32)).astype(np.float32)
    outputs = []
    for interpret in (True, False):
        kernels.INTERPRET_ON_CPU = interpret
        kernel_configs.ACTION_LINEAR_TRITON = interpret  # the action side's kernels too
        engine = Pi0Engine.random(dims, state_dim=6, action_dim=6, num_cameras=3,
                                  options=EngineOptions(device='cpu', precision='fp16',
                                                        max_frame_height=120,
                                                        max_frame_width=160, max_batch=2))
        # Two observations: the batch strides of every view (stream rows, Euler update).
        results = engine.infer_batch([
            (frames, np.linspace(-1, 1, 6), 'pick up the cube', None, noise),
            (frames[::-1], np.linspace(1, -1, 6), 'open the drawer', None, noise[::-1])],
            rtc=rtc)
        if rtc is not None:
            assert [r.rtc_applied for r in results] == [q is not None for q in rtc], results
        outputs.append(torch.from_numpy(np.stack([result.actions for result in results]))
                       .flatten().double())
    kernels.INTERPRET_ON_CPU = True
    return tuple(outputs)


def check_engine_triton_path_matches_pytorch_path():
    from pi0_ros.engine.config import ModelDims

    rng = np.random.default_rng(4)
    frames = [rng.integers(0, 256, (120, 160, 3), dtype=np.uint8) for _ in range(2)] \
        + [rng.integers(0, 256, (90, 180, 3), dtype=np.uint8)[:, ::2]]  # not contiguous
    # Two Euler steps and 112-pixel images: every kernel and stride of the full path, in a
    # quarter of the interpreter's time (the step count and the image size change no branch).
    dims = dataclasses.replace(ModelDims.tiny(), num_steps=2, image_size=112)
    triton_path, torch_path = _triton_and_pytorch_actions(dims, frames)
    cosine = F.cosine_similarity(triton_path, torch_path, dim=0).item()
    assert cosine > 0.999, cosine


def check_engine_with_qkv_rope_matches_pytorch_path():
    """Check the engine with the expert's qkv + RoPE fused against the PyTorch path."""
    from pi0_ros.engine.config import ModelDims

    rng = np.random.default_rng(5)
    frames = [rng.integers(0, 256, (120, 160, 3), dtype=np.uint8) for _ in range(3)]
    # Heads of 32 dims: RoPE's halves of 16 fill the kernel's 16 columns.
    dims = dataclasses.replace(ModelDims.tiny(), num_steps=2, image_size=112, head_dim=32)
    kernel_configs.QKV_ROPE_MAX_ROWS = 128  # the denoiser's 102 rows, not the prefix's
    kernel_configs.QKV_ROPE_CONFIG = dict(kernel_configs.QKV_ROPE_CONFIG, block_k=32)
    calls = []
    fused = gemm.qkv_rope
    gemm.qkv_rope = lambda *args: calls.append(fused(*args)) or calls[-1]
    triton_path, torch_path = _triton_and_pytorch_actions(dims, frames)
    assert True in calls and False in calls, calls  # the denoiser fused, the prefix not
    cosine = F.cosine_similarity(triton_path, torch_path, dim=0).item()
    assert cosine > 0.999, cosine


def check_engine_frame_graph_keeps_encoded_frames_across_warmup():
    """Check that cached cameras stay cached and exact across warm-up (the frames stage)."""
    from pi0_ros.engine import Pi0Engine
    from pi0_ros.engine.config import EngineOptions, ModelDims

    rng = np.random.default_rng(6)
    frames = [rng.integers(0, 256, (60, 80, 3), dtype=np.uint8) for _ in range(3)]
    dims = dataclasses.replace(ModelDims.tiny(), num_steps=2, image_size=112)
    noise = rng.standard_normal((50, 32)).astype(np.float32)
    engine = Pi0Engine.random(dims, state_dim=6, action_dim=6, num_cameras=3,
                              options=EngineOptions(device='cpu', precision='fp32',
                                                    max_frame_height=60, max_frame_width=80))
    assert engine._packed_frames
    state = np.linspace(-1, 1, 6)
    before = engine.infer(frames, state, 'pick', frame_keys=[1, 2, 3], noise=noise)
    engine.warmup()  # its frames stage writes slot 0's first camera from zero table rows
    after = engine.infer(frames, state, 'pick', frame_keys=[1, 2, 3], noise=noise)
    assert after.vision_cache_hits == 3
    np.testing.assert_array_equal(after.actions, before.actions)


def check_engine_guided_triton_path_matches_pytorch_path():
    """Real-Time Chunking's guided steps (the velocity written by the action kernel)."""
    from pi0_ros.engine.config import ModelDims, RTCRequest

    rng = np.random.default_rng(5)
    frames = [rng.integers(0, 256, (120, 160, 3), dtype=np.uint8) for _ in range(3)]
    dims = dataclasses.replace(ModelDims.tiny(), num_steps=2, image_size=112)
    prev = np.cumsum(rng.normal(scale=0.5, size=(30, 6)), axis=0).astype(np.float32)
    triton_path, torch_path = _triton_and_pytorch_actions(
        dims, frames, rtc=[RTCRequest(prev, 3, execution_horizon=20), None])
    guided = triton_path.numel() // 2  # the first observation's actions
    cosine = F.cosine_similarity(triton_path[:guided], torch_path[:guided], dim=0).item()
    # (Guidance moves this chunk far: cosine 0.31 with the unguided one when checked.)
    assert cosine > 0.999, cosine
    cosine = F.cosine_similarity(triton_path, torch_path, dim=0).item()
    assert cosine > 0.999, cosine


if __name__ == '__main__':
    assert kernels.INTERPRET_ON_CPU, 'run with TRITON_INTERPRET=1 PI0_ROS_TRITON_ON_CPU=1'
    globals()[f'check_{sys.argv[1]}']()
    print(sys.argv[1], 'ok')
