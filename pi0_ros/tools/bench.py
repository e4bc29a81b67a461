# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Benchmark Pi0Engine against LeRobot's PI0Policy (same process, device and weights).

python -m pi0_ros.tools.bench --dims full --precision auto --batches 1,2,4,8 --out reports/bench
Writes bench.json and PNG plots into --out; prints a summary table. --rtc lerobot,jacobian also
times Real-Time Chunking guided calls against plain ones, per batch size, on engines of the
same weights built with EngineOptions.rtc (one per mode).
"""
import argparse
import dataclasses
import gc
import json
import os
from pathlib import Path
import platform
import sys
import threading
import time

import numpy as np
import torch

from pi0_ros import nvml
from pi0_ros.engine import EngineOptions, kernel_configs, memory, ModelDims, Pi0Engine
from pi0_ros.engine.config import parse_layer_ranges, RTCOptions, RTCRequest
from pi0_ros.engine.engine import resolve_device, resolve_dtype
from pi0_ros.engine.loading import NormStats
from pi0_ros.engine.tokenizer import build_builtin_tokenizer

INSTRUCTION = 'pick up the red block and put it in the bowl'
# --rtc modes: RTCOptions.jacobian of each (False: LeRobot 0.6.1's correction, the weighted
# error; True: the paper's vector-Jacobian product through the action expert).
RTC_MODES = {'lerobot': False, 'jacobian': True}


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog='pi0-ros-bench',
                                     description=__doc__.strip().splitlines()[0])
    parser.add_argument('--dims', choices=('tiny', 'full'), default='tiny')
    parser.add_argument('--precision', choices=('auto', 'fp32', 'bf16', 'fp16'), default='auto')
    parser.add_argument('--device', default='auto', help="'auto', 'cpu', 'cuda' or 'cuda:N'")
    parser.add_argument('--batches', default='1', help='comma-separated batch sizes to sweep')
    parser.add_argument('--instruction', default=INSTRUCTION,
                        help='the prompt of every call (the built-in tokenizer: one token per '
                             'byte, plus <bos> and a newline; the default fills 47 of 48)')
    parser.add_argument('--buckets', default='',
                        help='comma-separated batch buckets of the sweep engine (default: the '
                             "engine's, every size up to 8 then multiples of 4)")
    parser.add_argument('--iters', type=int, default=50, help='timed calls per batch size')
    parser.add_argument('--warmup-iters', type=int, default=3)
    parser.add_argument('--lerobot-iters', type=int, default=20)
    parser.add_argument('--cameras', type=int, default=3)
    parser.add_argument('--frame', default='480x640', help='camera frame size HxW')
    parser.add_argument('--state-dim', type=int, default=14)
    parser.add_argument('--action-dim', type=int, default=14)
    parser.add_argument('--no-cuda-graphs', action='store_true')
    parser.add_argument('--fp8-prefix', action='store_true',
                        help="FP8 activations and weights for the prefix MLP's gate/up "
                             'projection (--check then reports its accuracy in bf16/fp16)')
    parser.add_argument('--fp8-prefix-layers', default='all',
                        help="with --fp8-prefix: prefix layers whose MLP runs in FP8, e.g. "
                             "'4-16' or '0,2,5-7' (default: all, every layer with an MLP)")
    parser.add_argument('--no-pipelined-upload', action='store_true',
                        help='upload and encode all frames of a batch at once '
                             '(EngineOptions.pipelined_upload off)')
    parser.add_argument('--no-overlap-first-step', action='store_true',
                        help='run all denoising steps after the prefix (EngineOptions.'
                             'overlap_first_step off)')
    parser.add_argument('--no-pdl', action='store_true',
                        help='launch the Triton kernels without programmatic dependent launch')
    parser.add_argument('--kernel-config', action='append', default=[], metavar='NAME=VALUE',
                        help='set a switch (0/1), number or name in '
                             'pi0_ros.engine.kernel_configs, e.g. PREFETCH_WEIGHTS_MAX_ROWS=0 '
                             'or BLAS_LIBRARY=none; repeatable')
    parser.add_argument('--skip-lerobot', action='store_true')
    parser.add_argument('--check', action='store_true',
                        help='equivalence vs LeRobot fp32 (cosine / max-abs per precision)')
    parser.add_argument('--profile', action='store_true',
                        help='kernel-time table of one eager (no graphs) call per batch size of '
                             '--profile-batches (profile.txt for batch 1, profile_bN.txt)')
    parser.add_argument('--profile-batches', default='1')
    parser.add_argument('--memory-sweep', default='',
                        help='comma-separated max_batch values: build each engine and compare '
                             'its measured peak GPU memory (build, warm-up, inference, each '
                             "stage) with the memory planner's estimate")
    parser.add_argument('--memory-budget-gib', type=float, default=None,
                        help='let the memory planner pick the max_batch of the sweep engine '
                             '(the largest power-of-two bucket up to max(--batches) whose '
                             'estimate fits)')
    parser.add_argument('--rtc', default='',
                        help='comma-separated Real-Time Chunking modes to time against plain '
                             "calls at every batch size: 'lerobot' (RTCOptions.jacobian "
                             "False, LeRobot 0.6.1's correction), 'jacobian' (True, the "
                             "paper's); one engine per mode, built with EngineOptions.rtc")
    parser.add_argument('--rtc-delay', type=int, default=3,
                        help="with --rtc: each guided call's inference_delay; its previous "
                             "chunk is the last call's normalized_actions from this row on")
    parser.add_argument('--out', default='reports/bench')
    return parser.parse_args(argv)


def percentiles(values) -> dict:
    """p50/p90/p99/mean/min of a list of milliseconds."""
    array = np.asarray(values, dtype=np.float64)
    return {'p50': float(np.percentile(array, 50)), 'p90': float(np.percentile(array, 90)),
            'p99': float(np.percentile(array, 99)), 'mean': float(array.mean()),
            'min': float(array.min()), 'n': int(array.size)}


def synchronize(device: torch.device) -> None:
    """Wait for the device (no-op on the CPU)."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


class GpuSampler:
    """
    Samples the GPU's power, SM clock and power-cap state through NVML while timing runs.

    A context manager: a thread reads every period_s inside it; summary() reduces the samples
    (None without samples, e.g. on the CPU or without NVML) and gives the energy the GPU used
    inside (NVML's energy counter, read on entering and leaving: exact where the sampled power
    is not). read() -> (watts, MHz, capped) and energy() -> cumulative millijoules replace NVML
    in tests. Compute-bound batches can run at the power limit, with lower clocks when calls run
    back to back (benchmarks/ledger.json, exp-cublaslt-prompt-buckets-power). NVML's power is the
    average of the last second on Ampere and newer GPUs: loops of a few seconds or less read it
    low.
    """

    def __init__(self, device: torch.device, period_s: float = 0.1, read=None, energy=None):
        self._period = period_s
        self._read = read
        self._energy = energy
        self._energy_mj = [None, None]  # counter on entering, on leaving
        self.power_limit_w = None
        found = nvml.device_handle(device) if read is None else None
        if read is None and device.type == 'cuda' and found is None:
            print('[bench] no GPU telemetry (no NVML handle for this device)', flush=True)
        if found is not None:
            pynvml, handle = found
            try:
                self.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3
                self._read = lambda: (
                    pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    bool(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
                         & pynvml.nvmlClocksEventReasonSwPowerCap))
                self._energy = lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except Exception as error:  # noqa: B902 - telemetry is optional in a benchmark
                print(f'[bench] no GPU telemetry (NVML): {error}', flush=True)
        self._samples = []
        self._stop = threading.Event()
        self._thread = None

    def _read_energy(self):
        try:
            return None if self._energy is None else float(self._energy())
        except Exception:  # noqa: B902 - e.g. a GPU without the counter: no energy figure
            return None

    def __enter__(self) -> 'GpuSampler':
        self._energy_mj = [self._read_energy(), None]
        if self._read is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._energy_mj[1] = self._read_energy()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._samples.append(self._read())
            except Exception as error:  # noqa: B902 - e.g. NVML lost: keep what was read
                print(f'[bench] GPU telemetry stopped: {error}', flush=True)
                return
            self._stop.wait(self._period)

    def summary(self) -> 'dict | None':
        """
        Return median power (W) and SM clock (MHz), the power-capped share, the energy used.

        energy_j is the energy counter's difference between entering and leaving (None where
        it was not read).
        """
        if not self._samples:
            return None
        power, clock, capped = (np.asarray(values, dtype=np.float64)
                                for values in zip(*self._samples))
        start, stop = self._energy_mj
        return {'power_w_p50': float(np.median(power)),
                'sm_clock_mhz_p50': float(np.median(clock)),
                'power_capped_fraction': float(capped.mean()),
                'power_limit_w': self.power_limit_w, 'samples': len(self._samples),
                'energy_j': None if start is None or stop is None else (stop - start) / 1e3}


def random_frames(rng: np.random.Generator, cameras: int = 3, shape=(480, 640)) -> list:
    """One observation's random uint8 RGB frames (shape: height, width)."""
    return [rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for _ in range(cameras)]


def make_frames(args, count: int, seed: int) -> list:
    """`count` observations' worth of random uint8 frames."""
    height, width = (int(v) for v in args.frame.lower().split('x'))
    rng = np.random.default_rng(seed)
    return [random_frames(rng, args.cameras, (height, width)) for _ in range(count)]


def rtc_requests(results: list, delay: int) -> list:
    """
    Return one RTCRequest per result, as a control loop makes them after `delay` actions.

    Each observation's previous chunk is its last result's normalized_actions from row
    `delay` on (the actions not yet executed); horizon, schedule and guidance weight are the
    engine's RTCOptions defaults.
    """
    return [RTCRequest(result.normalized_actions[delay:], inference_delay=delay)
            for result in results]


def check_guided(results: list, batch: int) -> None:
    """Raise RuntimeError unless every result of a guided call was guided (no fallback)."""
    for slot, result in enumerate(results):
        if not result.rtc_applied:
            raise RuntimeError(f'batch {batch}, observation {slot}: the RTC request was not '
                               f'applied ({result.rtc_reason!r}); the timing would be of the '
                               'plain path')


def time_engine(engine: Pi0Engine, args, batch: int, iters: int,
                rtc_delay: 'int | None' = None) -> dict:
    """
    Latency of infer / infer_batch with new frames every call (no vision cache hits).

    rtc_delay: guide every call (Real-Time Chunking) towards the previous call's chunk of
    each observation (rtc_requests; the first guided call's comes from one plain call before
    the warm-up calls); every result must be guided (check_guided). The requests are made
    before the clock starts, as the node makes them before calling the engine.
    """
    pool = make_frames(args, 4 * batch, seed=batch)
    rng = np.random.default_rng(batch)
    states = rng.normal(size=(4 * batch, engine.state_dim)).astype(np.float32)
    latencies, stages = [], {key: [] for key in ('preprocess', 'vision', 'prefix', 'denoise')}
    previous = []  # the last call's results (their chunks guide the next call)
    counts = {'guided_calls': 0, 'guided_results': 0, 'applied_results': 0}

    def call(index, guided=rtc_delay is not None):
        picks = [(index * batch + k) % len(pool) for k in range(batch)]
        requests = rtc_requests(previous, rtc_delay) if guided else [None] * batch
        start = time.perf_counter()
        if batch == 1:
            results = [engine.infer(pool[picks[0]], states[picks[0]], args.instruction,
                                    rtc=requests[0])]
        else:
            results = engine.infer_batch([(pool[p], states[p], args.instruction) for p in picks],
                                         rtc=requests if guided else None)
        elapsed = (time.perf_counter() - start) * 1e3
        if guided:
            counts['guided_calls'] += 1
            counts['guided_results'] += len(results)
            counts['applied_results'] += sum(bool(r.rtc_applied) for r in results)
            check_guided(results, batch)
        previous[:] = results
        return elapsed, results[0].timings_ms

    if rtc_delay is not None:
        call(-1, guided=False)  # the first previous chunk
    for index in range(args.warmup_iters):
        call(index)
    with GpuSampler(engine.device) as sampler:  # the timed calls only
        for index in range(args.warmup_iters, args.warmup_iters + iters):
            elapsed, timings = call(index)
            latencies.append(elapsed)
            for key in stages:
                stages[key].append(timings[key])
    summary = percentiles(latencies)
    summary['gpu'] = sampler.summary()
    if summary['gpu'] and summary['gpu']['energy_j'] is not None:
        summary['gpu']['joules_per_chunk'] = summary['gpu']['energy_j'] / (iters * batch)
    summary['chunks_per_s'] = 1e3 * batch / summary['p50']  # at the median latency
    summary['chunks_per_s_mean'] = 1e3 * batch * len(latencies) / sum(latencies)  # all calls
    summary['stages_p50_ms'] = {key: float(np.median(v)) for key, v in stages.items()}
    summary['latencies_ms'] = latencies
    if rtc_delay is not None:
        summary['rtc'] = {'inference_delay': rtc_delay, **counts}  # warm-up calls included
    return summary


def encode_ahead(engine: Pi0Engine, frames: list, keys: list, count: int) -> list:
    """Encode cameras 0..count-1 one call each (Pi0Engine.encode_frames); return ms per call."""
    times = []
    for cam in range(count):
        start = time.perf_counter()
        engine.encode_frames({cam: frames[cam]}, {cam: keys[cam]})
        times.append((time.perf_counter() - start) * 1e3)
    return times


def time_frames_ahead(engine: Pi0Engine, args, iters: int) -> dict:
    """
    Batch 1 with camera frames encoded as they arrive (Pi0Engine.encode_frames), as the node does.

    'last_camera_in_call': every camera but the last encoded ahead, so the call encodes the one
    frame that completed the observation; 'all_cameras_ahead': the call encodes none. New frames
    and keys every call; 'encode_ms' is one camera's encode_frames call.
    """
    pool = make_frames(args, 4, seed=101)
    state = np.random.default_rng(101).normal(size=engine.state_dim).astype(np.float32)
    cameras = args.cameras
    encode, cases = [], {'last_camera_in_call': [], 'all_cameras_ahead': []}
    stages = {case: {key: [] for key in ('preprocess', 'vision', 'prefix', 'denoise')}
              for case in cases}
    for index in range(args.warmup_iters + iters):
        for case, ahead in (('last_camera_in_call', cameras - 1), ('all_cameras_ahead', cameras)):
            frames = pool[index % len(pool)]  # the keys are new every call: encoded anew
            keys = [(case, index, cam) for cam in range(cameras)]
            encoded = encode_ahead(engine, frames, keys, ahead)
            if index >= args.warmup_iters:
                encode.extend(encoded)
            start = time.perf_counter()
            result = engine.infer(frames, state, args.instruction, frame_keys=keys)
            elapsed = (time.perf_counter() - start) * 1e3
            if index >= args.warmup_iters:
                cases[case].append(elapsed)
                for key, values in stages[case].items():
                    values.append(result.timings_ms[key])
    report = {'encode_ms': percentiles(encode)}
    for case, latencies in cases.items():
        report[case] = percentiles(latencies)
        report[case]['stages_p50_ms'] = {key: float(np.median(values))
                                         for key, values in stages[case].items()}
        report[case]['latencies_ms'] = latencies
    return report


def prefix_fp8_options(args, precision: str = None) -> dict:
    """Return the EngineOptions fields of --fp8-prefix and --fp8-prefix-layers (off for fp32)."""
    on = args.fp8_prefix and precision != 'fp32'
    layers = parse_layer_ranges(args.fp8_prefix_layers or 'all')
    return {'prefix_fp8': on, 'prefix_fp8_layers': layers if on else ()}


def engine_options(args, max_batch: int) -> EngineOptions:
    """Options shared by every engine the benchmark builds."""
    buckets = sorted({int(b) for b in args.buckets.split(',') if b.strip()
                      and int(b) < max_batch} | {max_batch}) if args.buckets else ()
    return EngineOptions(precision=args.precision, device=args.device, max_batch=max_batch,
                         batch_buckets=tuple(buckets),
                         cuda_graphs=not args.no_cuda_graphs,
                         pipelined_upload=not args.no_pipelined_upload,
                         overlap_first_step=not args.no_overlap_first_step,
                         **prefix_fp8_options(args))


def bench_engine(args, dims: ModelDims, batches: list,
                 rtc: 'RTCOptions | None' = None) -> dict:
    """
    Start-up time, latency per batch size and peak memory of a random-weight engine.

    The engine is built for max(batches); start-up and peak memory therefore include every
    batch bucket's buffers and graphs (run with --batches 1 for the batch-1 node set-up).
    rtc: build it with EngineOptions.rtc (guided graphs captured at warm-up; the same random
    weights, seed 0) and time, per batch size, plain calls then guided calls right after
    (--rtc-delay): batches[b] = {'plain': ..., 'guided': ..., 'ratio_p50': guided / plain}.
    """
    device = torch.device('cuda' if args.device == 'auto' and torch.cuda.is_available()
                          else ('cpu' if args.device == 'auto' else args.device))
    if device.type == 'cuda':
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    start = time.perf_counter()
    options = engine_options(args, max(batches))
    if rtc is not None:
        options = dataclasses.replace(options, rtc=rtc)
    engine = Pi0Engine.random(dims, state_dim=args.state_dim, action_dim=args.action_dim,
                              num_cameras=args.cameras, options=options)
    synchronize(engine.device)
    built = time.perf_counter()
    engine.warmup()
    synchronize(engine.device)
    ready = time.perf_counter()
    report = {'device': str(engine.device), 'dtype': str(engine.dtype).replace('torch.', ''),
              'build_s': built - start, 'warmup_s': ready - built, 'startup_s': ready - start,
              'parameters': int(sum(t.numel() for t in engine.weights.tensors())),
              'batches': {}}
    if rtc is not None:
        report['rtc_options'] = dataclasses.asdict(rtc)
    for batch in batches:
        plain = time_engine(engine, args, batch, args.iters)
        print(f"  engine batch {batch}: p50 {plain['p50']:.2f} ms", flush=True)
        if rtc is None:
            report['batches'][str(batch)] = plain
            continue
        guided = time_engine(engine, args, batch, args.iters, rtc_delay=args.rtc_delay)
        report['batches'][str(batch)] = {'plain': plain, 'guided': guided,
                                         'ratio_p50': guided['p50'] / plain['p50'],
                                         'ratio_p99': guided['p99'] / plain['p99']}
        print(f"  engine batch {batch}, RTC guided (jacobian {rtc.jacobian}): p50 "
              f"{guided['p50']:.2f} ms ({guided['p50'] / plain['p50']:.2f}x plain)", flush=True)
    if 1 in batches and args.cameras > 1 and rtc is None:
        report['frames_ahead'] = time_frames_ahead(engine, args, args.iters)
    if engine.device.type == 'cuda':
        report['peak_memory_gib'] = (torch.cuda.max_memory_allocated(engine.device) - base) \
            / 2 ** 30
        report['memory_estimate_gib'] = memory.estimate_memory(
            dims, args.cameras, engine.options, engine.dtype).as_gib()['total']
    report['stats'] = engine.stats
    engine.close()
    del engine
    gc.collect()
    return report


def memory_sweep(args, dims: ModelDims, max_batches: list) -> dict:
    """
    Measured peak GPU memory per max_batch against the planner's estimate (CUDA only).

    Per engine: bytes after build, peak during build, warm-up (graph capture) and a full-batch
    call, and each stage's eager workspace (peak above the engine's resident memory).
    """
    device = torch.device('cuda' if args.device == 'auto' else args.device)
    results = {}
    for max_batch in max_batches:
        gc.collect()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        options = engine_options(args, max_batch)
        engine = Pi0Engine.random(dims, state_dim=args.state_dim, action_dim=args.action_dim,
                                  num_cameras=args.cameras, options=options)
        estimate = memory.estimate_memory(dims, args.cameras, options, engine.dtype)
        synchronize(device)
        resident = torch.cuda.memory_allocated(device) - base
        entry = {'estimate_gib': estimate.as_gib(), 'resident_gib': resident / 2 ** 30,
                 'build_peak_gib': (torch.cuda.max_memory_allocated(device) - base) / 2 ** 30}
        stages = {}
        full = (max_batch, engine._prefix_length)  # every prompt token (the largest bucket)
        for stage, size in (('vision', max_batch * args.cameras), ('prefix', full),
                            ('denoise', full)):
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            with torch.inference_mode():
                engine._stage_function(stage, size)()
            synchronize(device)
            stages[stage] = (torch.cuda.max_memory_allocated(device) - before) / 2 ** 30
        entry['stage_workspace_gib'] = stages
        torch.cuda.reset_peak_memory_stats(device)
        engine.warmup()
        synchronize(device)
        entry['warmup_peak_gib'] = (torch.cuda.max_memory_allocated(device) - base) / 2 ** 30
        frames = make_frames(args, max_batch, seed=7)
        state = np.zeros(args.state_dim, np.float32)
        engine.infer_batch([(f, state, args.instruction) for f in frames])
        synchronize(device)
        entry['run_peak_gib'] = (torch.cuda.max_memory_allocated(device) - base) / 2 ** 30
        entry['measured_peak_gib'] = max(entry['build_peak_gib'], entry['warmup_peak_gib'],
                                         entry['run_peak_gib'])
        entry['estimate_over_measured'] = (estimate.total / 2 ** 30) / entry['measured_peak_gib']
        print(f"  memory max_batch {max_batch}: measured {entry['measured_peak_gib']:.2f} GiB "
              f"(resident {entry['resident_gib']:.2f}, stages "
              + '/'.join(f'{v:.2f}' for v in stages.values())
              + f"), estimate {estimate.total / 2 ** 30:.2f} GiB", flush=True)
        results[str(max_batch)] = entry
        engine.close()
        del engine
    gc.collect()
    torch.cuda.empty_cache()
    return results


def comparison_options(args, precision: str, max_batch: int = 1) -> EngineOptions:
    """Return the timed engine's options at the precision of a comparison with LeRobot."""
    return dataclasses.replace(engine_options(args, max_batch), precision=precision,
                               **prefix_fp8_options(args, precision))


def identity_engine_from_policy(policy, dims: ModelDims, args, precision: str,
                                max_batch: int = 1) -> Pi0Engine:
    """Our engine over a LeRobot policy's live weights (identity normalization stats)."""
    from pi0_ros.engine.lerobot_reference import lerobot_tensor_getter
    return Pi0Engine(lerobot_tensor_getter(policy), dims, state_dim=args.state_dim,
                     action_dim=args.action_dim, num_cameras=args.cameras,
                     options=comparison_options(args, precision, max_batch),
                     state_stats=NormStats.identity(args.state_dim),
                     action_stats=NormStats.identity(args.action_dim),
                     tokenizer=build_builtin_tokenizer())


def lerobot_setup(args, dims: ModelDims, dtype: str):
    """Build a random LeRobot PI0Policy on the device, with identity-stat processors."""
    from pi0_ros.engine.lerobot_reference import build_lerobot_policy, make_lerobot_processors
    device = 'cuda' if args.device == 'auto' and torch.cuda.is_available() else (
        'cpu' if args.device == 'auto' else args.device)
    policy = build_lerobot_policy(dims, state_dim=args.state_dim, action_dim=args.action_dim,
                                  num_cameras=args.cameras, device=device, dtype=dtype)
    zeros = {'mean': np.zeros(args.state_dim, np.float32),
             'std': np.ones(args.state_dim, np.float32)}
    action = {'mean': np.zeros(args.action_dim, np.float32),
              'std': np.ones(args.action_dim, np.float32)}
    pre, post = make_lerobot_processors(policy, build_builtin_tokenizer(), zeros, action)
    return policy, pre, post


def bench_lerobot(args, dims: ModelDims) -> dict:
    """Time LeRobot predict_action_chunk and our engine on the same weights, batch 1."""
    from pi0_ros.engine.lerobot_reference import lerobot_batch
    on_gpu = torch.cuda.is_available() and args.device != 'cpu'
    half = args.precision in ('bf16', 'fp16') or (args.precision == 'auto' and on_gpu)
    policy, pre, post = lerobot_setup(args, dims, 'bfloat16' if half else 'float32')
    device = next(policy.parameters()).device
    frames = make_frames(args, 4, seed=99)
    state = np.zeros(args.state_dim, np.float32)
    batches = [pre(lerobot_batch(f, state, args.instruction, device)) for f in frames]
    latencies = []
    with torch.no_grad():
        for index in range(args.warmup_iters + args.lerobot_iters):
            synchronize(device)
            start = time.perf_counter()
            policy.predict_action_chunk(batches[index % len(batches)])
            synchronize(device)
            if index >= args.warmup_iters:
                latencies.append((time.perf_counter() - start) * 1e3)
    lerobot = percentiles(latencies)
    lerobot['latencies_ms'] = latencies
    lerobot['dtype'] = 'bfloat16' if half else 'float32'
    print(f"  lerobot batch 1: p50 {lerobot['p50']:.2f} ms", flush=True)
    engine = identity_engine_from_policy(policy, dims, args, args.precision)
    engine.warmup()
    ours = time_engine(engine, args, 1, args.iters)
    print(f"  engine (same weights) batch 1: p50 {ours['p50']:.2f} ms", flush=True)
    engine.close()
    del policy, engine, batches
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    return {'lerobot': lerobot, 'engine_same_weights': ours,
            'speedup_p50': lerobot['p50'] / ours['p50']}


def equivalence_check(args, dims: ModelDims) -> dict:
    """Our chunk at each precision vs LeRobot fp32 on identical inputs and noise."""
    from pi0_ros.engine.lerobot_reference import lerobot_predict
    policy, pre, post = lerobot_setup(args, dims, 'float32')
    rng = np.random.default_rng(5)
    frames = make_frames(args, 1, seed=5)[0]
    state = rng.normal(size=args.state_dim).astype(np.float32)
    noise = rng.normal(size=(dims.chunk_size, dims.max_action_dim)).astype(np.float32)
    reference = lerobot_predict(policy, pre, post, frames, state, args.instruction, noise)
    results = {}
    for precision in ('fp32', 'bf16', 'fp16'):
        engine = identity_engine_from_policy(policy, dims, args, precision)
        engine.warmup()
        actions = engine.infer(frames, state, args.instruction, noise=noise).actions
        engine.close()
        del engine
        gc.collect()
        max_abs = float(np.abs(actions - reference).max())
        results[precision] = {
            'cosine': float((actions * reference).sum()
                            / (np.linalg.norm(actions) * np.linalg.norm(reference))),
            'max_abs': max_abs, 'relative_max': max_abs / float(np.abs(reference).max())}
        print(f"  check {precision}: cosine {results[precision]['cosine']:.6f} "
              f"max-abs {max_abs:.3e} rel {results[precision]['relative_max']:.3e}", flush=True)
    results['reference_max_abs'] = float(np.abs(reference).max())
    del policy
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return results


def profile_kernels(args, dims: ModelDims, out: Path, batch: int = 1) -> None:
    """torch.profiler table (CUDA time per kernel) of one eager call of `batch` observations."""
    from torch.profiler import profile, ProfilerActivity
    options = EngineOptions(precision=args.precision, device=args.device, cuda_graphs=False,
                            max_batch=batch, **prefix_fp8_options(args))
    engine = Pi0Engine.random(dims, state_dim=args.state_dim, action_dim=args.action_dim,
                              num_cameras=args.cameras, options=options)
    frames = make_frames(args, batch, seed=3)
    state = np.zeros(args.state_dim, np.float32)
    observations = [(f, state, args.instruction) for f in frames]
    for _ in range(3):
        engine.infer_batch(observations)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if engine.device.type == 'cuda' else [])
    with profile(activities=activities) as prof:
        engine.infer_batch(observations)
    sort = 'cuda_time_total' if engine.device.type == 'cuda' else 'cpu_time_total'
    table = prof.key_averages().table(sort_by=sort, row_limit=40)
    (out / ('profile.txt' if batch == 1 else f'profile_b{batch}.txt')).write_text(table)
    print(f'[bench] profile, batch {batch}')
    print(table[:6000])
    engine.close()


def plot(report: dict, out: Path) -> list:
    """PNG plots: latency CDF per batch, stage breakdown, batch sweep, engine vs LeRobot."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    written = []
    batches = report['engine']['batches']
    figure, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for batch, data in batches.items():
        values = np.sort(data['latencies_ms'])
        axes[0].plot(values, np.linspace(0, 1, len(values)), label=f'batch {batch}')
    for mode, result in report.get('rtc', {}).get('modes', {}).items():
        for batch, entry in result['batches'].items():
            values = np.sort(entry['guided']['latencies_ms'])
            axes[0].plot(values, np.linspace(0, 1, len(values)), ':',
                         label=f'batch {batch}, RTC {mode}')
    for case, label in (('last_camera_in_call', 'batch 1, last camera in the call'),
                        ('all_cameras_ahead', 'batch 1, every camera ahead')):
        if 'frames_ahead' in report['engine']:
            values = np.sort(report['engine']['frames_ahead'][case]['latencies_ms'])
            axes[0].plot(values, np.linspace(0, 1, len(values)), '--', label=label)
    axes[0].set_xlabel('latency per call (ms)')
    axes[0].set_ylabel('fraction of calls')
    axes[0].set_title('Pi0Engine latency CDF')
    axes[0].legend()
    names = list(batches)
    bottom = np.zeros(len(names))
    for stage in ('preprocess', 'vision', 'prefix', 'denoise'):
        heights = np.array([batches[n]['stages_p50_ms'][stage] for n in names])
        axes[1].bar(names, heights, bottom=bottom, label=stage)
        bottom += heights
    axes[1].set_xlabel('batch size')
    axes[1].set_ylabel('median stage time (ms)')
    axes[1].set_title('stages')
    axes[1].legend()
    axes[2].plot([int(n) for n in names], [batches[n]['chunks_per_s'] for n in names], 'o-')
    axes[2].set_xlabel('batch size')
    axes[2].set_ylabel('chunks / s (at p50)')
    axes[2].set_title('batch sweep')
    figure.suptitle(f"{report['config']['dims']} dims, {report['engine']['dtype']}, "
                    f"{report['engine']['device']}")
    figure.tight_layout()
    path = out / 'engine.png'
    figure.savefig(path, dpi=110)
    plt.close(figure)
    written.append(path)
    if 'comparison' in report:
        comparison = report['comparison']
        figure, axis = plt.subplots(figsize=(6, 4.5))
        labels = ['LeRobot', 'Pi0Engine']
        values = [comparison['lerobot']['p50'], comparison['engine_same_weights']['p50']]
        axis.bar(labels, values, color=['tab:gray', 'tab:blue'])
        for x, value in enumerate(values):
            axis.text(x, value, f'{value:.1f} ms', ha='center', va='bottom')
        axis.set_ylabel('p50 latency, batch 1 (ms)')
        axis.set_title(f"same weights: {comparison['speedup_p50']:.1f}x faster")
        figure.tight_layout()
        path = out / 'vs_lerobot.png'
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def parse_rtc_modes(value: str) -> list:
    """Return the --rtc modes in RTC_MODES order (raise SystemExit naming an unknown one)."""
    modes = {mode.strip().lower() for mode in value.split(',') if mode.strip()}
    unknown = sorted(modes - set(RTC_MODES))
    if unknown:
        raise SystemExit(f'--rtc: unknown mode(s) {", ".join(unknown)}; expected a '
                         f'comma-separated list of {", ".join(RTC_MODES)}')
    return [mode for mode in RTC_MODES if mode in modes]


def bench_rtc(args, dims: ModelDims, batches: list, modes: list) -> dict:
    """
    Guided (Real-Time Chunking) calls against plain ones: one engine per mode, one at a time.

    Each engine has the timed engine's options plus EngineOptions.rtc (RTCOptions defaults,
    jacobian per mode) and the same random weights; it is closed before the next is built.
    """
    report = {'inference_delay': args.rtc_delay,
              'request': "per observation, the previous call's normalized_actions from row "
                         'inference_delay on; execution_horizon, schedule and '
                         "max_guidance_weight: the engine's RTCOptions() defaults",
              'modes': {}}
    for mode in modes:
        print(f'[bench] RTC {mode} (jacobian {RTC_MODES[mode]}): plain then guided calls, '
              f'batches {batches}, inference_delay {args.rtc_delay}', flush=True)
        report['modes'][mode] = bench_engine(args, dims, batches,
                                             rtc=RTCOptions(jacobian=RTC_MODES[mode]))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return report


def rtc_summary(entry: dict) -> dict:
    """Return the per-batch view of a guided timing: latency, ratio to plain, throughput."""
    guided, plain = entry['guided'], entry['plain']
    return {'p50': guided['p50'], 'p90': guided['p90'], 'p99': guided['p99'],
            'chunks_per_s': guided['chunks_per_s'], 'stages_p50_ms': guided['stages_p50_ms'],
            'plain_p50_same_engine': plain['p50'], 'ratio_to_plain_p50': entry['ratio_p50'],
            'guided_results': guided['rtc']['guided_results'],
            'applied_results': guided['rtc']['applied_results']}


def apply_kernel_config(setting: str) -> None:
    """Set NAME=VALUE (switch, number or name; none = None) in kernel_configs."""
    name, _, value = setting.partition('=')
    name = name.strip()
    if not hasattr(kernel_configs, name):
        raise SystemExit(f'--kernel-config: {setting!r} names no entry of kernel_configs')
    current = getattr(kernel_configs, name)
    if isinstance(current, bool):
        parsed = value.strip().lower() in ('1', 'true', 'on', 'yes')
    elif isinstance(current, int):
        parsed = int(value)
    elif current is None or isinstance(current, str):
        parsed = None if value.strip().lower() in ('', 'none') else value.strip()
    else:
        raise SystemExit(f'--kernel-config: {setting!r} is not a switch, number or name in '
                         'kernel_configs')
    setattr(kernel_configs, name, parsed)


def print_rtc_table(rtc: dict) -> None:
    """Print the guided timings of every mode next to the plain ones of the same engine."""
    for mode, result in rtc['modes'].items():
        print(f"RTC {mode} engine (jacobian {result['rtc_options']['jacobian']}): startup "
              f"{result['startup_s']:.1f} s (warmup {result['warmup_s']:.1f} s)"
              + (f", peak {result['peak_memory_gib']:.2f} GiB (planner "
                 f"{result['memory_estimate_gib']:.2f})" if 'peak_memory_gib' in result else ''))
    print(f"RTC guided calls (inference_delay {rtc['inference_delay']}), plain p50 of the same "
          'engine right before')
    print(f"{'batch':>5} {'mode':>8} {'plain':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
          f"{'ratio':>6} {'chunks/s':>9}  stages p50 (pre/vis/prefix/denoise)")
    for mode, result in rtc['modes'].items():
        for batch, entry in result['batches'].items():
            guided = entry['guided']
            stages = '/'.join(f"{guided['stages_p50_ms'][k]:.2f}" for k in
                              ('preprocess', 'vision', 'prefix', 'denoise'))
            print(f"{batch:>5} {mode:>8} {entry['plain']['p50']:8.2f} {guided['p50']:8.2f} "
                  f"{guided['p90']:8.2f} {guided['p99']:8.2f} {entry['ratio_p50']:5.2f}x "
                  f"{guided['chunks_per_s']:9.1f}  {stages}")


def main(argv=None) -> int:
    """Entry point of `python -m pi0_ros.tools.bench`, `pi0-ros-bench` and scripts/bench."""
    args = parse_args(argv)
    rtc_modes = parse_rtc_modes(args.rtc)
    if args.no_pdl:
        kernel_configs.PDL = False
    for setting in args.kernel_config:
        apply_kernel_config(setting)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dims = ModelDims.full() if args.dims == 'full' else ModelDims.tiny()
    batches = sorted({int(b) for b in args.batches.split(',') if b.strip()})
    if rtc_modes and not 0 <= args.rtc_delay < dims.chunk_size:
        raise SystemExit(f'--rtc-delay must be in 0..{dims.chunk_size - 1} (the chunk has '
                         f'{dims.chunk_size} rows), got {args.rtc_delay}')
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {'config': vars(args),
              'environment': {'python': sys.version.split()[0], 'torch': torch.__version__,
                              'platform': platform.platform(), 'cpu_count': os.cpu_count(),
                              'gpu': torch.cuda.get_device_name() if torch.cuda.is_available()
                              else None}}
    print(f'[bench] engine: dims {args.dims}, batch 1 (as the node runs it)', flush=True)
    report['engine'] = bench_engine(args, dims, [1])
    if args.memory_budget_gib is not None:
        planned = memory.plan_max_batch(int(args.memory_budget_gib * 2 ** 30), dims,
                                        args.cameras, engine_options(args, 1),
                                        resolve_dtype(args.precision, resolve_device(args.device)),
                                        limit=max(batches))
        print(f'[bench] memory planner: max_batch {planned} fits {args.memory_budget_gib} GiB',
              flush=True)
        report['memory_plan'] = {'budget_gib': args.memory_budget_gib, 'max_batch': planned}
        batches = [b for b in batches if b <= planned] or [1]
        batches = sorted(set(batches) | {planned})
    if batches != [1]:
        print(f'[bench] engine batch sweep {batches}', flush=True)
        sweep = bench_engine(args, dims, batches)
        report['engine_sweep'] = sweep
        report['engine']['batches'].update({k: v for k, v in sweep['batches'].items()
                                            if k != '1'})
    if rtc_modes:
        report['rtc'] = bench_rtc(args, dims, batches, rtc_modes)
        for mode, result in report['rtc']['modes'].items():
            for batch, entry in result['batches'].items():
                report['engine']['batches'][batch].setdefault('rtc', {})[mode] = \
                    rtc_summary(entry)
    memory_batches = sorted({int(b) for b in args.memory_sweep.split(',') if b.strip()})
    if memory_batches and torch.cuda.is_available() and args.device != 'cpu':
        print(f'[bench] memory sweep, max_batch {memory_batches}', flush=True)
        report['memory'] = memory_sweep(args, dims, memory_batches)
    if not args.skip_lerobot:
        print('[bench] LeRobot comparison (same weights)', flush=True)
        report['comparison'] = bench_lerobot(args, dims)
    if args.check:
        print('[bench] equivalence check vs LeRobot fp32', flush=True)
        report['check'] = equivalence_check(args, dims)
    if args.profile:
        for batch in sorted({int(b) for b in args.profile_batches.split(',') if b.strip()}):
            profile_kernels(args, dims, out, batch)
    report['plots'] = [str(p) for p in plot(report, out)]
    with open(out / 'bench.json', 'w', encoding='utf-8') as stream:
        json.dump(report, stream, indent=1)
    engine = report['engine']
    print(f"\nPi0Engine {args.dims} {engine['dtype']} on {engine['device']}: startup "
          f"{engine['startup_s']:.1f} s (build {engine['build_s']:.1f} s, warmup "
          f"{engine['warmup_s']:.1f} s)" + (f", peak {engine['peak_memory_gib']:.2f} GiB "
                                            f"(planner {engine['memory_estimate_gib']:.2f})"
                                            if 'peak_memory_gib' in engine else ''))
    if 'engine_sweep' in report:
        sweep = report['engine_sweep']
        print(f"sweep engine (max_batch {max(batches)}): startup {sweep['startup_s']:.1f} s"
              + (f", peak {sweep['peak_memory_gib']:.2f} GiB" if 'peak_memory_gib' in sweep
                 else ''))
    print(f"{'batch':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'chunks/s':>9}  "
          'stages p50 (pre/vis/prefix/denoise)')
    for batch, data in engine['batches'].items():
        stages = '/'.join(f"{data['stages_p50_ms'][k]:.2f}" for k in
                          ('preprocess', 'vision', 'prefix', 'denoise'))
        gpu = data.get('gpu')
        power = (f"  {gpu['power_w_p50']:.0f} W, {gpu['sm_clock_mhz_p50']:.0f} MHz, power-capped "
                 f"{100 * gpu['power_capped_fraction']:.0f} %" if gpu else '')
        if gpu and gpu.get('joules_per_chunk') is not None:
            power += f", {gpu['joules_per_chunk']:.2f} J/chunk"
        print(f"{batch:>5} {data['p50']:8.2f} {data['p90']:8.2f} {data['p99']:8.2f} "
              f"{data['chunks_per_s']:9.1f}  {stages}{power}")
    if 'rtc' in report:
        print_rtc_table(report['rtc'])
    if 'frames_ahead' in engine:
        ahead = engine['frames_ahead']
        print(f"batch 1, frames encoded as they arrive: one camera encoded ahead "
              f"{ahead['encode_ms']['p50']:.2f} ms; then the call p50 "
              f"{ahead['last_camera_in_call']['p50']:.2f} ms with the last camera's frame, "
              f"{ahead['all_cameras_ahead']['p50']:.2f} ms with every camera ahead")
    if 'comparison' in report:
        comparison = report['comparison']
        print(f"LeRobot ({comparison['lerobot']['dtype']}) p50 {comparison['lerobot']['p50']:.2f}"
              f" ms vs engine {comparison['engine_same_weights']['p50']:.2f} ms: "
              f"{comparison['speedup_p50']:.1f}x")
    print(f'wrote {out / "bench.json"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
