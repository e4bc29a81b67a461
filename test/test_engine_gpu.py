# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Pi0Engine on CUDA: no steady-state allocation, graphs equal eager, LeRobot equivalence.

Skipped without CUDA; run through the device tool (benchmarks/run_h200.sh).
"""
import dataclasses
import threading

import numpy as np
import pytest
import torch

from pi0_ros.engine import EngineOptions, kernel_configs, ModelDims, Pi0Engine

pytestmark = pytest.mark.gpu
DIMS = ModelDims.tiny()


def make_engine(**options) -> Pi0Engine:
    options.setdefault('device', 'cuda')
    return Pi0Engine.random(DIMS, state_dim=7, action_dim=7, num_cameras=3, seed=2,
                            options=EngineOptions(**options))


def observation(seed: int, shape=(480, 640, 3)):
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(3)]
    state = rng.normal(size=7).astype(np.float32)
    noise = rng.normal(size=(DIMS.chunk_size, DIMS.max_action_dim)).astype(np.float32)
    return frames, state, noise


def allocation_counts(device) -> dict:
    stats = torch.cuda.memory_stats(device)
    return {key: stats.get(key, 0) for key in ('allocation.all.allocated',
                                               'segment.all.allocated',
                                               'requested_bytes.all.allocated')}


@pytest.mark.parametrize('precision', ['bf16', 'fp16', 'fp32'])
def test_steady_state_allocates_nothing(precision):
    pi0 = make_engine(precision=precision, max_batch=2)
    pi0.warmup()
    frames, state, noise = observation(0)
    other_frames = observation(1)[0]
    keys = [(1, 'a'), (1, 'b'), (1, 'c')]
    # First sight of each frame size and instruction may allocate (resize plans, tokenizer).
    pi0.infer(frames, state, 'grasp', noise=noise)
    pi0.infer(frames, state, 'push', frame_keys=keys)
    pi0.infer_batch([(frames, state, 'grasp'), (other_frames, state, 'push')])
    torch.cuda.synchronize()
    before = allocation_counts(pi0.device)
    for index in range(6):
        pi0.infer(other_frames if index % 2 else frames, state, 'grasp')
        pi0.infer(frames, state, 'grasp', frame_keys=keys, noise=noise)
        pi0.infer(frames, state, 'grasp', frame_keys=keys)  # three cache hits
        pi0.infer(frames, state, 'push' if index % 2 else 'grasp')
        pi0.infer_batch([(frames, state, 'grasp'), (other_frames, state, 'push')])
    torch.cuda.synchronize()
    assert allocation_counts(pi0.device) == before
    assert pi0.stats['vision_cache_hits'] >= 18


def test_graphs_equal_eager():
    graphs = make_engine(precision='fp32', cuda_graphs=True, max_batch=2)
    eager = make_engine(precision='fp32', cuda_graphs=False, max_batch=2)
    graphs.warmup()
    for seed, prompt in ((3, 'grasp'), (4, 'put the red block in the blue bowl')):
        frames, state, noise = observation(seed)  # prompt buckets of 16 and 48 tokens
        a = graphs.infer(frames, state, prompt, noise=noise).actions
        b = eager.infer(frames, state, prompt, noise=noise).actions
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # vision 1-6 frames; prefix and denoise per batch bucket (1, 2) and prompt (16, 32, 48)
    assert len(graphs._graphs) == 6 + 2 * 3 * 2


def test_gpu_matches_cpu_fp32():
    """Same weights on both devices (random() draws per device, so share one tensor set)."""
    from pi0_ros.engine.engine import random_lerobot_tensors
    from pi0_ros.engine.loading import NormStats
    from pi0_ros.engine.model import lerobot_parameter_shapes
    from pi0_ros.engine.tokenizer import build_builtin_tokenizer
    draw = random_lerobot_tensors(DIMS, torch.device('cpu'), 2)
    tensors = {key: draw(key) for key in lerobot_parameter_shapes(DIMS)}

    def on(device):
        return Pi0Engine(tensors.__getitem__, DIMS, state_dim=7, action_dim=7, num_cameras=3,
                         options=EngineOptions(device=device, precision='fp32'),
                         state_stats=NormStats.identity(7), action_stats=NormStats.identity(7),
                         tokenizer=build_builtin_tokenizer())

    gpu, cpu = on('cuda'), on('cpu')
    frames, state, noise = observation(5, shape=(720, 1280, 3))
    a = gpu.infer(frames, state, 'open the drawer', noise=noise).actions
    b = cpu.infer(frames, state, 'open the drawer', noise=noise).actions
    assert np.abs(a - b).max() / np.abs(b).max() <= 1e-4


def test_cached_vision_equals_uncached_on_gpu(monkeypatch):
    # Bit for bit: the expert's split-K sums in a fixed order, not added with atomics.
    monkeypatch.setattr(kernel_configs, 'SKINNY_ATOMIC_MAX_ROWS', 0)
    pi0 = make_engine(precision='bf16')
    frames, state, noise = observation(6)
    keys = [(7, 'a'), (7, 'b'), (7, 'c')]
    first = pi0.infer(frames, state, 'grasp', frame_keys=keys, noise=noise)
    cached = pi0.infer(frames, state, 'grasp', frame_keys=keys, noise=noise)
    assert cached.vision_cache_hits == 3
    np.testing.assert_array_equal(cached.actions, first.actions)


def test_frames_encoded_ahead_match_frames_encoded_in_the_call_on_gpu():
    """encode_frames (one camera per graph replay) gives the features the call would compute."""
    pi0 = make_engine(precision='fp32')
    pi0.warmup()
    frames, state, noise = observation(16)
    keys = [(16, 'a'), (16, 'b'), (16, 'c')]
    assert pi0.encode_frames({0: frames[0]}, {0: keys[0]}) == 1
    assert pi0.encode_frames({1: frames[1]}, {1: keys[1]}) == 1
    ahead = pi0.infer(frames, state, 'grasp', frame_keys=keys, noise=noise)
    assert ahead.vision_cache_hits == 2
    in_call = make_engine(precision='fp32').infer(frames, state, 'grasp', noise=noise)
    np.testing.assert_allclose(ahead.actions, in_call.actions, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('graphs', [True, False])
def test_overlapped_first_step_equals_sequential_on_gpu(graphs):
    """Step 0 on its own stream, waiting per layer for the prefix's K/V, as if run after it."""
    frames, state, noise = observation(17)
    chunks = {}
    for overlap in (True, False):
        pi0 = make_engine(precision='bf16', max_batch=2, cuda_graphs=graphs,
                          overlap_first_step=overlap)
        chunks[overlap] = [pi0.infer(frames, state, 'grasp', noise=noise).actions,
                           pi0.infer_batch([(frames, state, 'grasp', None, noise)] * 2)[1]
                           .actions]
    for a, b in zip(chunks[True], chunks[False]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize('precision', ['bf16', 'fp16'])
def test_cublaslt_stages_match_default_blas_and_leave_the_setting_alone(precision, monkeypatch):
    """The engine's half-precision GEMMs through cuBLASLt (kernel_configs.BLAS_LIBRARY)."""
    from pi0_ros.engine import kernel_configs

    default = torch.backends.cuda.preferred_blas_library()
    frames, state, noise = observation(21)
    chunks = {}
    for library in ('cublaslt', None):
        monkeypatch.setattr(kernel_configs, 'BLAS_LIBRARY', library)
        pi0 = make_engine(precision=precision)
        pi0.warmup()
        chunks[library] = pi0.infer(frames, state, 'grasp', noise=noise).actions
        assert torch.backends.cuda.preferred_blas_library() == default
    a, b = chunks['cublaslt'].ravel(), chunks[None].ravel()
    assert np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.9999


def test_batch_buckets_match_single_calls():
    pi0 = make_engine(precision='fp32', max_batch=4)
    single = make_engine(precision='fp32')
    pi0.warmup()
    observations = [observation(seed) for seed in (8, 9, 10)]
    results = pi0.infer_batch([(f, s, 'grasp', None, n) for f, s, n in observations])
    for result, (frames, state, noise) in zip(results, observations):
        expected = single.infer(frames, state, 'grasp', noise=noise).actions
        np.testing.assert_allclose(result.actions, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('tail', [0, 4])
def test_on_gpu_tail_comes_once_the_work_before_the_tail_ran_and_leaves_the_chunk_alone(tail):
    plain_engine = make_engine(precision='bf16', max_batch=2)
    pi0 = make_engine(precision='bf16', max_batch=2, denoise_tail_steps=tail)
    pi0.warmup()
    assert (('denoise_tail', (2, pi0._image_tokens + DIMS.tokenizer_max_length)) in pi0._graphs
            ) == bool(tail)
    frames, state, noise = observation(12)
    plain = plain_engine.infer_batch([(frames, state, 'grasp', None, noise)] * 2)
    seen = []

    def gpu_tail():
        # The work before the tail is done on the GPU when this is called; the rest is queued.
        seen.append((pi0._events['prefix'].query(), pi0._events['tail'].query()))
    early = pi0.infer_batch([(frames, state, 'grasp', None, noise)] * 2, on_gpu_tail=gpu_tail)
    assert seen == [(True, True)]
    for a, b in zip(plain, early):  # bf16 split-K sums are atomic: equal up to their order
        np.testing.assert_allclose(a.actions, b.actions, rtol=2e-2, atol=2e-2)


def test_fused_qkv_rope_gives_the_chunk_of_the_gemm_and_rope_kernels(monkeypatch):
    from pi0_ros.engine import gemm
    frames, state, noise = observation(14)
    fused, qkv_rope = [], gemm.qkv_rope
    monkeypatch.setattr(gemm, 'qkv_rope', lambda *args: fused.append(qkv_rope(*args)) or fused[-1])
    results = {}
    for max_rows in (0, 64):  # 0: the skinny GEMM's partial sums, then rope_qkv
        monkeypatch.setattr(kernel_configs, 'QKV_ROPE_MAX_ROWS', max_rows)
        # Heads of 32 dims: RoPE's halves of 16 fill the kernel's 16 columns; an expert 64
        # wide: whole blocks of the kernel's 64-deep K (the tiny model's 32 is too narrow).
        engine = Pi0Engine.random(dataclasses.replace(DIMS, head_dim=32, expert_width=64),
                                  state_dim=7, action_dim=7, num_cameras=3, seed=2,
                                  options=EngineOptions(device='cuda', precision='bf16'))
        engine.warmup()  # graphs captured with this setting
        results[max_rows] = engine.infer(frames, state, 'grasp', noise=noise).actions
        assert (True in fused) == bool(max_rows)
    np.testing.assert_allclose(results[64], results[0], rtol=2e-2, atol=2e-2)


def test_pipelined_upload_equals_one_upload():
    """Frames copied while the encoder runs on earlier ones give the same actions."""
    engines = {flag: make_engine(precision='fp32', max_batch=4, pipelined_upload=flag,
                                 frame_graph=False) for flag in (True, False)}
    observations = [observation(seed, shape) for seed, shape in
                    ((12, (480, 640, 3)), (13, (720, 1280, 3)), (14, (480, 640, 3)),
                     (15, (360, 640, 3)))]
    batch = [(f, s, 'grasp', None, n) for f, s, n in observations]
    pipelined = engines[True]
    uploads = []
    original = pipelined._upload
    pipelined._upload = lambda pending, start, stop, pipelined: (
        uploads.append((start, stop, pipelined)) or original(pending, start, stop, pipelined))
    results = {flag: engine.infer_batch(batch) for flag, engine in engines.items()}
    assert uploads == [(0, 3, True), (3, 12, True)]  # a first quarter, then the rest
    for a, b in zip(results[True], results[False]):  # vision ran as 3 + 9 frames vs 12
        np.testing.assert_allclose(a.actions, b.actions, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_frame_graph_equals_frames_one_by_one(precision):
    """Packed frames in one graph: the actions of frames copied, resized and encoded apart."""
    engines = {flag: make_engine(precision=precision, max_batch=4, frame_graph=flag)
               for flag in (True, False)}
    assert engines[True]._packed_frames and not engines[False]._packed_frames
    observations = [observation(seed, shape) for seed, shape in
                    ((12, (480, 640, 3)), (13, (720, 1280, 3)), (14, (480, 640, 3)),
                     (15, (360, 640, 3)))]
    keys = [[(seed, cam) for cam in range(3)] for seed in range(4)]
    newer = observation(16)[0]
    tolerance = 1e-4 if precision == 'fp32' else 2e-2
    results = {}
    for flag, engine in engines.items():
        first = engine.infer_batch([(f, s, 'grasp', k, n)
                                    for (f, s, n), k in zip(observations, keys)])
        # Warm-up after a call: its captures write into slot 0's first camera, and the features
        # encoded so far come back.
        engine.warmup()
        # Cached features in other slots: only two new frames (slot 1 camera 2, slot 3
        # camera 0), written into their own slots' image tokens; one camera encoded ahead.
        engine.encode_frames({1: newer[1]}, {1: 'ahead'}, slot=2)
        changed = [list(f) for f, _, _ in observations]
        changed[1][2], changed[3][0], changed[2][1] = newer[2], newer[0], newer[1]
        changed_keys = [list(k) for k in keys]
        changed_keys[1][2], changed_keys[3][0], changed_keys[2][1] = 'b', 'c', 'ahead'
        second = engine.infer_batch([(f, s, 'grasp', k, n) for f, (_, s, n), k in
                                     zip(changed, observations, changed_keys)])
        assert [r.vision_cache_hits for r in second] == [3, 2, 3, 2]
        results[flag] = first + second
    for a, b in zip(results[True], results[False]):
        np.testing.assert_allclose(a.actions, b.actions, rtol=tolerance, atol=tolerance)
    # The cached features equal fresh ones: the same observations without keys.
    fresh = engines[True].infer_batch([(f, s, 'grasp', None, n) for f, (_, s, n) in
                                       zip(changed, observations)])
    for a, b in zip(results[True][4:], fresh):
        np.testing.assert_allclose(a.actions, b.actions, rtol=tolerance, atol=tolerance)


def test_warmup_and_infer_on_a_worker_thread(monkeypatch):
    """The node captures and replays graphs on its one worker thread."""
    monkeypatch.setattr(kernel_configs, 'SKINNY_ATOMIC_MAX_ROWS', 0)  # bit for bit, below
    pi0 = make_engine(precision='bf16')
    frames, state, noise = observation(11)
    outcome = {}

    def work():
        pi0.warmup()
        outcome['actions'] = pi0.infer(frames, state, 'grasp', noise=noise).actions

    worker = threading.Thread(target=work, name='pi0-worker')
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert outcome['actions'].shape == (DIMS.chunk_size, 7)
    np.testing.assert_array_equal(pi0.infer(frames, state, 'grasp', noise=noise).actions,
                                  outcome['actions'])


@pytest.mark.parametrize('precision', ['fp32', 'bf16', 'fp16'])
def test_matches_lerobot_on_gpu(precision):
    from pi0_ros.tools.bench import identity_engine_from_policy, INSTRUCTION, parse_args
    from pi0_ros.engine.lerobot_reference import build_lerobot_policy, lerobot_predict
    from pi0_ros.engine.lerobot_reference import make_lerobot_processors
    from pi0_ros.engine.tokenizer import build_builtin_tokenizer

    # The benchmark's own defaults (a hand-made namespace missed options added later).
    args = parse_args(['--device', 'cuda', '--state-dim', '7', '--action-dim', '7',
                       '--cameras', '3'])

    policy = build_lerobot_policy(DIMS, state_dim=7, action_dim=7, num_cameras=3,
                                  device='cuda', seed=4)
    identity = {'mean': np.zeros(7, np.float32), 'std': np.ones(7, np.float32)}
    pre, post = make_lerobot_processors(policy, build_builtin_tokenizer(), identity, identity)
    frames, state, noise = observation(12)
    expected = lerobot_predict(policy, pre, post, frames, state, INSTRUCTION, noise)
    pi0 = identity_engine_from_policy(policy, DIMS, args, precision)
    pi0.warmup()
    actions = pi0.infer(frames, state, INSTRUCTION, noise=noise).actions
    max_abs = np.abs(actions - expected).max()
    cos = (actions * expected).sum() / (np.linalg.norm(actions) * np.linalg.norm(expected))
    print(f'gpu tiny {precision}: cosine {cos:.6f} max-abs {max_abs:.3e}')
    if precision == 'fp32':
        assert max_abs / np.abs(expected).max() <= 1e-4
    else:
        assert cos >= 0.999


def test_linear_gelu_epilogue_is_the_tanh_gelu():
    from pi0_ros.engine.model import linear_gelu_tanh
    torch.backends.cuda.matmul.allow_tf32 = False
    generator = torch.Generator(device='cuda').manual_seed(0)
    x = torch.randn(300, 96, device='cuda', generator=generator)
    weight = torch.randn(200, 96, device='cuda', generator=generator) * 0.2
    bias = torch.randn(200, device='cuda', generator=generator)
    product = torch.nn.functional.linear(x, weight, bias)
    fused = linear_gelu_tanh(x, weight, bias)
    tanh_form = torch.nn.functional.gelu(product, approximate='tanh')
    assert (fused - tanh_form).abs().max().item() < 1e-4
    assert (fused - torch.nn.functional.gelu(product)).abs().max().item() > 1e-4


def test_memory_estimate_covers_the_measured_peak():
    from pi0_ros.engine.memory import estimate_memory
    full = ModelDims.full()
    device = torch.device('cuda')
    for max_batch in (1, 4):
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        options = EngineOptions(device='cuda', precision='bf16', max_batch=max_batch)
        engine = Pi0Engine.random(full, state_dim=7, action_dim=7, num_cameras=3,
                                  options=options)
        engine.warmup()
        rng = np.random.default_rng(0)
        frames = [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for _ in range(3)]
        engine.infer_batch([(frames, np.zeros(7, np.float32), 'pick')] * max_batch)
        torch.cuda.synchronize(device)
        measured = torch.cuda.max_memory_allocated(device) - base
        estimate = estimate_memory(full, 3, options, engine.dtype).total
        engine.close()
        del engine
        # The planner never promises less than the engine takes, and wastes under 10 %.
        assert measured <= estimate <= 1.10 * measured, (max_batch, measured, estimate)


def test_nvml_handle_is_the_gpu_pytorch_uses():
    # The telemetry's GPU is found by UUID (pi0_ros.nvml): NVML must know it, at the PCI address
    # CUDA gives PyTorch's device, and see memory that PyTorch takes there. (NVML's memory
    # total counts memory CUDA does not offer, so totals are not compared.)
    from pi0_ros import nvml
    found = nvml.device_handle(torch.device('cuda', 0))
    assert found is not None
    pynvml, handle = found
    properties = torch.cuda.get_device_properties(0)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    assert (pci.domain, pci.bus, pci.device) == (
        properties.pci_domain_id, properties.pci_bus_id, properties.pci_device_id)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()                   # the block below is a new allocation
    used_before = pynvml.nvmlDeviceGetMemoryInfo(handle).used
    block = torch.empty(2 * 2 ** 30, dtype=torch.uint8, device='cuda:0')
    block.fill_(1)
    torch.cuda.synchronize()
    assert pynvml.nvmlDeviceGetMemoryInfo(handle).used - used_before >= 2 * 2 ** 30
    del block
