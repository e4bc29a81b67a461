# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Model dimensions, engine options, Real-Time Chunking requests and the inference result."""
from dataclasses import dataclass, field
import math

import numpy as np


@dataclass(frozen=True)
class ModelDims:
    """Every dimension of a Pi0 model (SigLIP tower, Gemma prefix, Gemma action expert)."""

    # SigLIP vision tower + projector.
    vision_width: int = 1152
    vision_depth: int = 27
    vision_heads: int = 16
    vision_mlp_dim: int = 4304
    patch_size: int = 14
    image_size: int = 224
    # Gemma prefix (PaliGemma language model).
    prefix_width: int = 2048
    prefix_depth: int = 18
    prefix_mlp_dim: int = 16384
    prefix_heads: int = 8
    # Gemma action expert.
    expert_width: int = 1024
    expert_depth: int = 18
    expert_mlp_dim: int = 4096
    expert_heads: int = 8
    # Shared by prefix and expert (the expert attends to the prefix KV cache).
    num_kv_heads: int = 1
    head_dim: int = 256
    vocab_size: int = 257152
    # Policy.
    max_state_dim: int = 32
    max_action_dim: int = 32
    chunk_size: int = 50
    num_steps: int = 10
    tokenizer_max_length: int = 48
    min_period: float = 4e-3
    max_period: float = 4.0
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    layer_norm_eps: float = 1e-6

    def __post_init__(self):
        if self.num_kv_heads != 1:
            raise ValueError('num_kv_heads must be 1 (multi-query attention), '
                             f'got {self.num_kv_heads}')
        if self.prefix_depth != self.expert_depth:
            raise ValueError('prefix_depth and expert_depth must be equal '
                             f'({self.prefix_depth} != {self.expert_depth})')
        if self.image_size % self.patch_size:
            raise ValueError(f'image_size {self.image_size} is not a multiple of patch_size '
                             f'{self.patch_size}')
        if self.vision_width % self.vision_heads:
            raise ValueError('vision_width must be a multiple of vision_heads')
        if self.head_dim % 2 or self.expert_width % 2:
            raise ValueError('head_dim and expert_width must be even')
        for name in ('chunk_size', 'num_steps', 'tokenizer_max_length', 'max_state_dim',
                     'max_action_dim', 'vocab_size'):
            if getattr(self, name) < 1:
                raise ValueError(f'{name} must be >= 1, got {getattr(self, name)}')
        if not 0.0 < self.min_period < self.max_period < float('inf'):
            raise ValueError('the time embedding needs 0 < min_period < max_period, got '
                             f'{self.min_period} and {self.max_period}')

    @property
    def tokens_per_image(self) -> int:
        """Return the number of SigLIP patch tokens per camera image."""
        return (self.image_size // self.patch_size) ** 2

    @classmethod
    def full(cls) -> 'ModelDims':
        """Pi0 as published: SigLIP So400m/14, Gemma 2B prefix, Gemma 300M expert."""
        return cls()

    @classmethod
    def tiny(cls) -> 'ModelDims':
        """Return a few-layer model with the full structure, for tests and CPU demos."""
        return cls(vision_width=32, vision_depth=2, vision_heads=2, vision_mlp_dim=64,
                   patch_size=14, image_size=224,
                   prefix_width=64, prefix_depth=2, prefix_mlp_dim=128, prefix_heads=2,
                   expert_width=32, expert_depth=2, expert_mlp_dim=64, expert_heads=2,
                   num_kv_heads=1, head_dim=16, vocab_size=512)


# Prefix weight schedules of Real-Time Chunking (LeRobot's RTCAttentionSchedule, lower case).
RTC_SCHEDULES = ('zeros', 'ones', 'linear', 'exp')


@dataclass(frozen=True)
class RTCOptions:
    """
    Real-Time Chunking (Black, Galliker, Levine 2025) guidance defaults of an engine.

    schedule, max_guidance_weight and execution_horizon are the defaults of RTCRequest's
    (LeRobot 0.6.1's RTCConfig defaults: LINEAR, 10.0, 10). jacobian picks the correction:
    False (LeRobot 0.6.1): the velocity is treated as a constant of x_t, correction = the
    weighted error; True (the paper, the Kinetix code): the vector-Jacobian product through
    the action expert, error - t * J_v^T error (one backward pass of the expert per step).
    """

    schedule: str = 'linear'
    max_guidance_weight: float = 10.0
    execution_horizon: int = 10
    jacobian: bool = False

    def __post_init__(self):
        if not isinstance(self.schedule, str) or self.schedule.lower() not in RTC_SCHEDULES:
            raise ValueError(f'rtc schedule must be one of {RTC_SCHEDULES}, got '
                             f'{self.schedule!r}')
        weight = self.max_guidance_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not math.isfinite(weight) or weight <= 0:
            raise ValueError('rtc max_guidance_weight must be a finite number > 0, got '
                             f'{weight!r}')
        horizon = self.execution_horizon
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f'rtc execution_horizon must be an integer >= 1, got {horizon!r}')
        if not isinstance(self.jacobian, bool):
            raise ValueError(f'rtc jacobian must be a bool, got {self.jacobian!r}')


@dataclass(frozen=True)
class RTCRequest:
    """
    Real-Time Chunking input of one observation (infer(rtc=...), infer_batch(rtc=[...])).

    prev_chunk: the previous chunk's actions not yet executed when this observation was taken,
    [T, action_dim] with 1 <= T <= chunk_size, in the model's normalized action space (the
    `normalized_actions` of an earlier result, or Pi0Engine.normalize_actions of robot
    units); row 0 is the action meant for this observation's time. inference_delay: the
    actions that will have been executed by the time this chunk arrives (0..chunk_size).
    execution_horizon, schedule and max_guidance_weight: None takes the engine's RTCOptions.
    A request that cannot be used runs the observation without guidance and says why in
    InferenceResult.rtc_reason; it never raises.
    """

    prev_chunk: object
    inference_delay: int
    execution_horizon: 'int | None' = None
    schedule: 'str | None' = None
    max_guidance_weight: 'float | None' = None


@dataclass(frozen=True)
class EngineOptions:
    """Runtime options: precision, device, batch capacity, CUDA graphs, largest frame."""

    precision: str = 'auto'
    device: str = 'auto'
    max_batch: int = 1
    # Static batch sizes (one CUDA graph each; a batch runs in the smallest bucket that holds
    # it). Empty: every size up to 8, then every multiple of 4, and max_batch (the prefix costs
    # the same per observation at every size, so padding slots cost as much as robots). Fewer
    # buckets (e.g. (1, 2, 4)) start faster; each bucket adds graphs and start-up time.
    batch_buckets: tuple = ()
    # Static prompt lengths in tokens (prefix and denoise graphs for each, per batch bucket):
    # the prefix covers the images and the smallest of these that holds every prompt of the
    # call; the padding tokens after it are skipped (their work never reaches the actions).
    # The model's tokenizer_max_length is always one. Empty: multiples of 16 when max_batch > 1,
    # else none (at batch 1 the shorter prefix fills as many GEMM tiles: no gain on an H200).
    prompt_buckets: tuple = ()
    cuda_graphs: bool = True
    max_frame_height: int = 1080
    max_frame_width: int = 1920
    seed: int = 0
    # FP8 (e4m3) activations and weights, row-wise scales, for the prefix MLP's gate/up
    # projection (half of the compute-bound prefix's FLOPs) on FP8 tensor cores; CUDA GPUs of
    # compute capability 8.9+ (elsewhere emulated in float32, for tests). Off: half floats.
    prefix_fp8: bool = False
    # With prefix_fp8: the prefix layers (indices from 0) whose MLP runs in FP8; empty: all of
    # them. Fewer layers give back accuracy for speed (benchmarks/RESULTS.md, fp8-prefix-h200).
    prefix_fp8_layers: tuple = ()
    # With many frames to encode (several observations, CUDA): upload and encode a first
    # quarter of them, and copy the rest to the GPU while the vision encoder runs on it.
    pipelined_upload: bool = True
    # CUDA with Triton: the frames of a call are packed back to back into pinned memory with
    # their resize plans, copied to the GPU in one transfer, and resized, encoded and written
    # into the prefix by one CUDA graph per frame count (two launches from Python in all).
    # Off: each frame is copied on its own, then resized, encoded and copied per camera run
    # (with pipelined_upload).
    frame_graph: bool = True
    # Run the first denoising step inside the prefix stage: on CUDA on a second stream, each
    # expert layer starting as soon as the prefix has written that layer's K/V, so the
    # latency-bound step overlaps the compute-bound prefix (elsewhere after the prefix). The
    # prefix stage's time then includes that step, the denoise stage's the other nine.
    overlap_first_step: bool = True
    # The last this many Euler steps run as a stage (CUDA graph) of their own, so that the host
    # learns when only they remain (on_gpu_tail of infer/infer_batch: e.g. the next process's
    # GPU turn begins, its host work before its first launch overlapping them). 0: one denoise
    # stage (on_gpu_tail is called once the prefix has run). At most num_steps - 2.
    denoise_tail_steps: int = 0
    # Real-Time Chunking defaults (RTCOptions). Set: its guided stages are captured at
    # warm-up. None: RTCOptions() defaults, guided stages captured on the first guided call.
    rtc: 'RTCOptions | None' = None

    def __post_init__(self):
        if self.precision not in ('auto', 'fp32', 'bf16', 'fp16'):
            raise ValueError(f"precision must be 'auto', 'fp32', 'bf16' or 'fp16', "
                             f'got {self.precision!r}')
        if not (self.device in ('auto', 'cpu', 'cuda')
                or (isinstance(self.device, str) and self.device.startswith('cuda:')
                    and self.device[5:].isdigit())):
            raise ValueError("device must be 'auto', 'cpu', 'cuda' or 'cuda:N', "
                             f'got {self.device!r}')
        if isinstance(self.denoise_tail_steps, bool) or not isinstance(
                self.denoise_tail_steps, int) or self.denoise_tail_steps < 0:
            raise ValueError('denoise_tail_steps must be an integer >= 0, '
                             f'got {self.denoise_tail_steps!r}')
        for name in ('max_batch', 'max_frame_height', 'max_frame_width'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'{name} must be an integer >= 1, got {value!r}')
        buckets = tuple(self.batch_buckets)
        if buckets and (any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                            for b in buckets)
                        or list(buckets) != sorted(set(buckets)) or buckets[-1] != self.max_batch):
            raise ValueError('batch_buckets must be increasing positive integers ending at '
                             f'max_batch ({self.max_batch}), got {self.batch_buckets!r}')
        prompts = tuple(self.prompt_buckets)
        if prompts and (any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                            for n in prompts) or list(prompts) != sorted(set(prompts))):
            raise ValueError('prompt_buckets must be increasing positive token counts, '
                             f'got {self.prompt_buckets!r}')
        layers = tuple(self.prefix_fp8_layers)
        if layers and (not self.prefix_fp8
                       or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                              for i in layers)
                       or list(layers) != sorted(set(layers))):
            raise ValueError('prefix_fp8_layers must be increasing layer indices (>= 0) and '
                             f'needs prefix_fp8, got {self.prefix_fp8_layers!r}')
        if self.rtc is not None and not isinstance(self.rtc, RTCOptions):
            raise ValueError(f'rtc must be None or an RTCOptions, got {self.rtc!r}')


def parse_layer_ranges(text: str) -> tuple:
    """
    Parse layer indices written as '4-16', '0,2,5-7' or 'all' into a tuple (all: ()).

    The result is what EngineOptions.prefix_fp8_layers takes; raise ValueError on bad text.
    """
    text = text.strip()
    if text.lower() == 'all':
        return ()
    layers = set()
    for part in filter(None, (p.strip() for p in text.split(','))):
        first, dash, last = part.partition('-')
        if not first.strip().isdigit() or (dash and not last.strip().isdigit()):
            raise ValueError(f"layer ranges look like '4-16' or '0,2,5-7', got {text!r}")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f'layer range {part!r} ends before it starts')
        layers.update(range(low, high + 1))
    if not layers:
        raise ValueError(f"no layers in {text!r} (use 'all' for every layer)")
    return tuple(sorted(layers))


@dataclass
class InferenceResult:
    """
    One action chunk in robot units, with per-stage timings.

    normalized_actions: the same chunk in the model's normalized action space [chunk,
    action_dim] (what RTCRequest.prev_chunk takes). rtc_applied: whether Real-Time Chunking
    guided this chunk; rtc_reason: why not, when a request was given and not used ('' when
    applied or when none was given).
    """

    actions: np.ndarray
    timings_ms: dict = field(default_factory=dict)
    vision_cache_hits: int = 0
    normalized_actions: 'np.ndarray | None' = None
    rtc_applied: bool = False
    rtc_reason: str = ''
