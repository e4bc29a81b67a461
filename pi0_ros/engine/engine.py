# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Pi0Engine: preallocated, cached, CUDA-graph-replayed Pi0 inference."""
from collections.abc import Mapping, Set as AbstractSet
import contextlib
import operator
from pathlib import Path
import threading
import time
import warnings

import numpy as np
import torch

from pi0_ros.engine import gemm, kernel_configs
from pi0_ros.engine.config import EngineOptions, InferenceResult, ModelDims, RTCOptions
from pi0_ros.engine.errors import CheckpointError, EngineError, InputError, NonFiniteOutputError
from pi0_ros.engine.kernels import use_triton
from pi0_ros.engine.loading import (CheckpointInfo, NormStats, read_checkpoint_info,
                                    SafetensorsWeights)
from pi0_ros.engine.model import (build_weights, denoise_forward, Guidance,
                                  lerobot_parameter_shapes, prefix_forward, vision_forward)
from pi0_ros.engine.preprocess import (copy_frame_bytes, FrameResizer, FrameTable,
                                       resize_frames, scale_to_signed_unit, table_words)
from pi0_ros.engine.rtc import plan_guidance
from pi0_ros.engine.tokenizer import build_builtin_tokenizer, load_tokenizer, tokenize_prompt

PRECISIONS = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}
STAGES = ('preprocess', 'vision', 'prefix', 'denoise', 'total')
# Frames to encode above this many bytes are uploaded in two parts (EngineOptions.
# pipelined_upload).
PIPELINED_UPLOAD_BYTES = 8 << 20


def resolve_device(device: str) -> torch.device:
    """'auto' -> the first CUDA device if there is one, else the CPU."""
    if device == 'auto':
        return torch.device('cuda', torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device('cpu')
    resolved = torch.device(device)
    if resolved.type == 'cuda':
        if not torch.cuda.is_available():
            raise EngineError(f'device {device!r} requested but CUDA is not available')
        if resolved.index is None:
            resolved = torch.device('cuda', torch.cuda.current_device())
    return resolved


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """'auto' -> bf16 on GPUs that support it, fp16 on other GPUs, fp32 on the CPU."""
    if precision != 'auto':
        return PRECISIONS[precision]
    if device.type != 'cuda':
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def device_buffer_shapes(dims: ModelDims, num_cameras: int, max_batch: int, max_frame_height: int,
                         max_frame_width: int, dtype: torch.dtype) -> dict:
    """
    {attribute: (shape, dtype)} of every device buffer whose size grows with max_batch.

    Pi0Engine allocates exactly these (and the memory planner counts them).
    """
    d, cams = dims, num_cameras
    frames = max_batch * cams
    prefix_length = cams * d.tokens_per_image + d.tokenizer_max_length
    cache = ((d.expert_depth, max_batch, d.num_kv_heads, prefix_length + d.chunk_size + 1,
              d.head_dim), dtype)
    chunk = ((max_batch, d.chunk_size, d.max_action_dim), torch.float32)
    return {
        # The frame table (preprocess.FrameTable rows), then the frames' bytes.
        '_frame_staging': ((frames * (4 * table_words(d.image_size)
                                      + max_frame_height * max_frame_width * 3),), torch.uint8),
        '_pixels': ((max_batch * cams, 3, d.image_size, d.image_size), torch.float32),
        '_vision_out': ((max_batch * cams, d.tokens_per_image, d.prefix_width), dtype),
        '_prefix_embeds': ((max_batch, prefix_length, d.prefix_width), dtype),
        '_tokens': ((max_batch, d.tokenizer_max_length), torch.int64),
        '_key_mask': ((max_batch, 1, 1, prefix_length), torch.bool),
        '_prefix_valid': ((max_batch,), torch.int64),
        '_state': ((max_batch, d.max_state_dim), torch.float32),
        '_noise': chunk, '_after_first_step': chunk, '_denoise_head': chunk, '_chunk': chunk,
        '_cache_k': cache, '_cache_v': cache,
        # Real-Time Chunking guidance (model.Guidance).
        '_rtc_prev': chunk, '_rtc_weights': ((max_batch, d.chunk_size, 1), torch.float32),
        '_rtc_guidance': ((max_batch, d.num_steps), torch.float32), '_rtc_velocity': chunk}


def _camera_runs(items: list):
    """Yield (first, last, slot, cam) per run of items [(slot, cam, ...)] with cam, cam + 1, ..."""
    first = 0
    for index in range(1, len(items) + 1):
        if index == len(items) or items[index][0] != items[first][0] \
                or items[index][1] != items[first][1] + index - first:
            yield first, index, items[first][0], items[first][1]
            first = index


def batch_buckets(max_batch: int, chosen=()) -> list:
    """
    Return the static batch sizes: chosen, or every size to 8, multiples of 4, max_batch.

    A batch runs in the smallest bucket that holds it and every padded slot costs a full
    observation's prefix (H200: batch 3 took 31.96 ms in a bucket of 3, 37.44 ms in one of 4),
    while a bucket costs only its CUDA graphs' capture at start-up.
    """
    if chosen:
        return list(chosen)
    buckets = [size for size in range(1, max_batch + 1) if size <= 8 or size % 4 == 0]
    if buckets[-1] != max_batch:
        buckets.append(max_batch)
    return buckets


def prompt_buckets(max_length: int, chosen=(), max_batch: int = 1) -> list:
    """
    Return the static prompt lengths: chosen (those below max_length), then max_length.

    The prefix of a call runs over the smallest that holds its prompts: a 16-token prompt
    skips 32 padding tokens, 4 % of the prefix's 816 rows with three cameras. By default
    multiples of 16 when max_batch > 1; at batch 1 only max_length, since 784 and 816 rows
    fill the same number of 128-row GEMM tiles (H200: no gain, and each length adds graphs).
    """
    if not chosen and max_batch > 1:
        chosen = range(16, max_length, 16)
    return [n for n in chosen if n < max_length] + [max_length]


def random_lerobot_tensors(dims: ModelDims, device: torch.device, seed: int):
    """Getter of random LeRobot-named float32 tensors (init like HF: N(0, 0.02))."""
    shapes = lerobot_parameter_shapes(dims)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    values = {}

    def get(key):
        if key not in values:
            tensor = torch.randn(shapes[key], generator=generator, device=device) * 0.02
            if key.endswith(('layer_norm1.weight', 'layer_norm2.weight',
                             'post_layernorm.weight')):
                tensor += 1.0  # LayerNorm scales near 1 (Gemma RMSNorm uses 1 + w already)
            values[key] = tensor
        return values.pop(key)  # each key is read once; free it right after fusion

    return get


def _index(name: str, value, count: int) -> int:
    """Return value as an int in 0..count-1 (numpy integers too), or raise InputError."""
    try:
        index = operator.index(value)
    except TypeError:
        index = None
    if index is None or isinstance(value, bool) or not 0 <= index < count:
        raise InputError(f'{name} must be an integer in 0..{count - 1}, got {value!r}')
    return index


def _as_float32(where: str, name: str, value) -> np.ndarray:
    """Return a numeric array or tensor as float32 numpy, or raise InputError."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or value.is_complex():
            raise InputError(f'{where}{name} is not numeric: dtype {value.dtype}')
        value = value.detach().to('cpu', torch.float32).numpy()
    try:
        array = np.asarray(value)
        if array.dtype.kind not in 'fiu':  # strings, objects and booleans are no numbers
            raise TypeError(f'dtype {array.dtype}')
        return array.astype(np.float32)
    except (TypeError, ValueError) as error:
        raise InputError(f'{where}{name} is not numeric: {error}') from error


class Pi0Engine:
    """Pi0 inference: frames + state + instruction -> action chunk in robot units."""

    def __init__(self, get_tensor, dims: ModelDims, *, state_dim: int, action_dim: int,
                 num_cameras: int, options: EngineOptions, state_stats: NormStats,
                 action_stats: NormStats, tokenizer):
        """Build from a getter of LeRobot-named tensors; use random() or from_pretrained()."""
        if not 1 <= state_dim <= dims.max_state_dim:
            raise ValueError(f'state_dim must be in 1..{dims.max_state_dim}, got {state_dim}')
        if not 1 <= action_dim <= dims.max_action_dim:
            raise ValueError(f'action_dim must be in 1..{dims.max_action_dim}, got {action_dim}')
        if num_cameras < 1:
            raise ValueError(f'num_cameras must be >= 1, got {num_cameras}')
        if any(index >= dims.prefix_depth - 1 for index in options.prefix_fp8_layers):
            # The last prefix layer only writes K/V: it has no MLP.
            raise ValueError(f'prefix_fp8_layers must be MLP layers 0..{dims.prefix_depth - 2}, '
                             f'got {options.prefix_fp8_layers}')
        if options.denoise_tail_steps > dims.num_steps - 2:
            raise ValueError(f'denoise_tail_steps must be at most {dims.num_steps - 2} (of '
                             f'{dims.num_steps} steps), got {options.denoise_tail_steps}')
        self.dims = dims
        self.options = options
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.num_cameras = num_cameras
        self.chunk_size = dims.chunk_size
        self.device = resolve_device(options.device)
        self.dtype = resolve_dtype(options.precision, self.device)
        if options.prefix_fp8 and self.device.type == 'cuda' \
                and torch.cuda.get_device_capability(self.device) < (8, 9):
            raise EngineError('prefix_fp8 needs FP8 tensor cores (compute capability 8.9 or '
                              f'newer); {torch.cuda.get_device_name(self.device)} has '
                              f'{torch.cuda.get_device_capability(self.device)}')
        self._state_stats = state_stats
        self._action_stats = action_stats
        self._state_denominator = (state_stats.std + np.float32(state_stats.eps)).astype(
            np.float32)
        self._action_denominator = (action_stats.std + np.float32(action_stats.eps)).astype(
            np.float32)
        self._rtc_options = options.rtc if options.rtc is not None else RTCOptions()
        self._tokenizer = tokenizer
        self._closed = False
        self._lock = threading.Lock()
        self._is_cuda = self.device.type == 'cuda'
        self._use_graphs = self._is_cuda and options.cuda_graphs
        self._graphs = {}
        self._graph_pool = None
        self._capture_stream = None
        self._graph_thread = None
        self._buckets = batch_buckets(options.max_batch, options.batch_buckets)
        self._prompt_lengths = prompt_buckets(dims.tokenizer_max_length, options.prompt_buckets,
                                              options.max_batch)
        self._stats = {'vision_cache_hits': 0, 'language_cache_hits': 0, 'calls': 0,
                       'frames_encoded_ahead': 0}
        self._image_tokens = num_cameras * dims.tokens_per_image
        self._prefix_length = self._image_tokens + dims.tokenizer_max_length
        with torch.inference_mode(False), torch.no_grad():
            self.weights = build_weights(get_tensor, dims, self.dtype, self.device,
                                         self._prefix_length, prefix_fp8=options.prefix_fp8,
                                         prefix_fp8_layers=options.prefix_fp8_layers)
            self._allocate()
        self._slot_instructions = [None] * options.max_batch
        self._slot_frame_keys = [[None] * num_cameras for _ in range(options.max_batch)]

    # ----------------------------------------------------------------------------------------
    # Construction
    @classmethod
    def random(cls, dims: ModelDims, *, state_dim: int, action_dim: int, num_cameras: int,
               seed: int = 0, options: EngineOptions = EngineOptions(), state_mean=None,
               state_std=None, action_mean=None, action_std=None,
               tokenizer=None) -> 'Pi0Engine':
        """Random weights (built on the target device); stats default to mean 0 / std 1."""
        device = resolve_device(options.device)

        def stats(mean, std, size, name):
            mean = np.zeros(size, np.float32) if mean is None else np.asarray(mean, np.float32)
            std = np.ones(size, np.float32) if std is None else np.asarray(std, np.float32)
            if mean.shape != (size,) or std.shape != (size,):
                raise ValueError(f'{name} mean/std must have shape ({size},)')
            return NormStats(mean, std, 1e-8)

        return cls(random_lerobot_tensors(dims, device, seed), dims, state_dim=state_dim,
                   action_dim=action_dim, num_cameras=num_cameras, options=options,
                   state_stats=stats(state_mean, state_std, state_dim, 'state'),
                   action_stats=stats(action_mean, action_std, action_dim, 'action'),
                   tokenizer=tokenizer if tokenizer is not None else build_builtin_tokenizer())

    @classmethod
    def from_pretrained(cls, path, *, tokenizer_path=None, options: EngineOptions =
                        EngineOptions(), dims: ModelDims | None = None) -> 'Pi0Engine':
        """
        Load a LeRobot pi0 checkpoint directory (config, weights, processor stats).

        dims overrides the model sizes that config.json implies (for shrunk test models).
        """
        directory = Path(path)
        info: CheckpointInfo = read_checkpoint_info(directory, dims)
        tokenizer = load_tokenizer(tokenizer_path if tokenizer_path is not None else directory)
        device = resolve_device(options.device)
        if len(tokenizer) > info.dims.vocab_size:
            raise CheckpointError(f'the tokenizer has {len(tokenizer)} tokens, more than the '
                                  f"model's vocabulary of {info.dims.vocab_size}")
        weights = SafetensorsWeights(directory, info.dims, device)
        return cls(weights, info.dims, state_dim=info.state_dim, action_dim=info.action_dim,
                   num_cameras=len(info.camera_names), options=options,
                   state_stats=info.state_stats, action_stats=info.action_stats,
                   tokenizer=tokenizer)

    def _allocate(self) -> None:
        """Every buffer inference touches, sized for max_batch and the largest frame."""
        d, o, dev = self.dims, self.options, self.device
        max_b, cams = o.max_batch, self.num_cameras
        pin = self._is_cuda
        shapes = device_buffer_shapes(d, cams, max_b, o.max_frame_height, o.max_frame_width,
                                      self.dtype)
        for name, (shape, dtype) in shapes.items():
            setattr(self, name, torch.zeros(shape, dtype=dtype, device=dev))
        self._key_mask.fill_(True)
        self._prefix_valid.fill_(self._prefix_length)
        # The Triton resize reads a frame table and needs no scratch; the PyTorch resize has its
        # scratch and no table.
        triton_resize = use_triton(self._pixels)
        self._resizer = (None if triton_resize else
                         FrameResizer(o.max_frame_height, o.max_frame_width, d.image_size, dev))
        # Frame staging: the frame table's rows, then the frames (one row of the largest frame
        # each when uploaded one by one, back to back when packed); the same layout on the host.
        frames, words = max_b * cams, table_words(d.image_size)
        self._table_bytes = 4 * frames * words
        self._frame_table = self._frame_staging[:self._table_bytes].view(torch.int32).view(
            frames, words)
        self._device_frames = self._frame_staging[self._table_bytes:].view(frames, -1)
        # Packed frames: one upload and one frames graph (resize, vision, prefix) per call.
        self._packed_frames = o.frame_graph and triton_resize
        self._host_frame_staging = self._host_frame_table = self._host_table = None
        self._host_frames = self._host_frames_bytes = None
        if triton_resize:
            self._host_frame_staging = torch.zeros(self._frame_staging.shape, dtype=torch.uint8,
                                                   pin_memory=pin)
            self._host_frame_table = self._host_frame_staging[:self._table_bytes].view(
                torch.int32).view(frames, words)
            self._host_table = FrameTable(self._host_frame_table.numpy(), d.image_size)
            self._host_frames = self._host_frame_staging[self._table_bytes:].numpy()
            self._host_frames_bytes = memoryview(self._host_frames)
        self._host_tokens = torch.zeros(max_b, d.tokenizer_max_length, dtype=torch.int64,
                                        pin_memory=pin)
        self._host_token_mask = torch.ones(max_b, d.tokenizer_max_length, dtype=torch.bool,
                                           pin_memory=pin)
        self._host_prefix_valid = torch.full((max_b,), self._prefix_length, dtype=torch.int64,
                                             pin_memory=pin)
        self._host_state = torch.zeros(max_b, d.max_state_dim, dtype=torch.float32,
                                       pin_memory=pin)
        self._host_noise = torch.zeros(max_b, d.chunk_size, d.max_action_dim, pin_memory=pin)
        self._host_chunk = (torch.zeros(max_b, d.chunk_size, d.max_action_dim, pin_memory=True)
                            if pin else self._chunk)
        self._host_rtc_prev = torch.zeros(max_b, d.chunk_size, d.max_action_dim,
                                          pin_memory=pin)
        self._host_rtc_weights = torch.zeros(max_b, d.chunk_size, 1, pin_memory=pin)
        self._host_rtc_guidance = torch.zeros(max_b, d.num_steps, pin_memory=pin)
        self._guidance = Guidance(self._rtc_prev, self._rtc_weights, self._rtc_guidance,
                                  self._rtc_velocity, jacobian=self._rtc_options.jacobian)
        self._generator = torch.Generator(device=dev)
        self._generator.manual_seed(o.seed)
        self._copy_stream = torch.cuda.Stream(device=dev) if self._is_cuda else None
        # The first denoising step's stream and its per-layer waits on the prefix (at
        # kernel_configs.FIRST_STEP_STREAM_PRIORITY).
        overlap = self._is_cuda and o.overlap_first_step
        self._overlap_stream = (torch.cuda.Stream(
            device=dev, priority=kernel_configs.FIRST_STEP_STREAM_PRIORITY) if overlap else None)
        self._layer_events = ([torch.cuda.Event() for _ in range(d.expert_depth)]
                              if self._overlap_stream is not None else None)
        if self._is_cuda:
            self._events = {name: torch.cuda.Event(enable_timing=True)
                            for name in ('start', 'preprocess', 'vision', 'prefix', 'tail',
                                         'denoise')}

    def buffer_pointers(self) -> dict:
        """data_ptr of every preallocated buffer (stable across calls; for tests)."""
        names = [name for name, value in vars(self).items() if isinstance(value, torch.Tensor)]
        pointers = {name: getattr(self, name).data_ptr() for name in names}
        buffers = self._resizer.buffers() if self._resizer is not None else []
        for index, tensor in enumerate(buffers):
            pointers[f'_resizer.{index}'] = tensor.data_ptr()
        return pointers

    def _prepare_pixels(self, sizes: list, offset: int = 0) -> None:
        """Device frames offset.. (their sizes [(H, W)]) -> _pixels[:n]."""
        count = len(sizes)
        if use_triton(self._pixels):
            # Rows offset.. of the table (an earlier part's rows may still be uploading).
            row_bytes = self._device_frames.stride(0)
            for index, (height, width) in enumerate(sizes, offset):
                self._host_table.write(index, height, width, index * row_bytes, 0, 0)
            rows = slice(offset, offset + count)
            self._frame_table[rows].copy_(self._host_frame_table[rows], non_blocking=True)
            resize_frames(self._device_frames.view(-1), self._frame_table[rows],
                          self._pixels[:count])
            return
        for index, (height, width) in enumerate(sizes):
            frame = self._device_frames[offset + index, :height * width * 3]
            frame = frame.view(height, width, 3)
            self._resizer.resize_into(frame, self._pixels[index])
        scale_to_signed_unit(self._pixels[:count])

    def _upload_groups(self, pending: list) -> list:
        """
        Index ranges of the pending frames, uploaded and encoded one after the other.

        Many bytes (several observations): a first quarter, then the rest, whose host copies
        and uploads overlap the first quarter's vision encoder on the GPU. Else one range.
        """
        count = len(pending)
        if (not self._is_cuda or not self.options.pipelined_upload or count < 4
                or sum(item[3].nbytes for item in pending) < PIPELINED_UPLOAD_BYTES):
            return [(0, count)] if count else []
        first = count // 4
        return [(0, first), (first, count)]

    def _upload(self, pending: list, start: int, stop: int, pipelined: bool) -> None:
        """
        Copy pending frames start..stop-1 from their numpy arrays into the device frames.

        Straight from the arrays (pageable memory; CUDA stages the bytes, and each copy has
        read its array when it returns): measured faster on the H200 host than a copy into
        pinned memory first, on one thread or several (upload_ab.json: benchmarks/ledger.json
        record exp-buckets-upload-ablation).
        Pipelined, the copies run on a copy stream that the compute stream then waits for, so
        they overlap the vision encoder of earlier frames.
        """
        compute = torch.cuda.current_stream(self.device) if self._is_cuda else None
        pipelined = pipelined and self._is_cuda
        if pipelined and start == 0:
            # Whatever the compute stream still holds from before this call (nothing after a
            # completed call) finishes before the copies overwrite the device frames; the
            # later parts' copies then overlap the encoder of the first.
            self._copy_stream.wait_stream(compute)
        with torch.cuda.stream(self._copy_stream) if pipelined else contextlib.nullcontext(), \
                warnings.catch_warnings():
            # Frames decoded from ROS messages are read-only views; they are only read here.
            warnings.filterwarnings('ignore', message='The given NumPy array is not writable')
            for index in range(start, stop):
                frame = np.ascontiguousarray(pending[index][3]).reshape(-1)
                self._device_frames[index, :frame.size].copy_(
                    torch.from_numpy(frame), non_blocking=self._is_cuda)
        if pipelined:
            compute.wait_stream(self._copy_stream)

    # ----------------------------------------------------------------------------------------
    # Stage bodies (each writes only into preallocated buffers: safe to capture as graphs)
    def _vision_stage(self, count: int) -> None:
        vision_forward(self.weights, self.dims, self._pixels[:count], self._vision_out[:count])

    def _frames_stage(self, count: int) -> None:
        # Packed frames (uploaded with their table): resize, encode, and write each frame's
        # features into its slot's and camera's image tokens of the prefix embeddings.
        table = self._frame_table[:count]
        resize_frames(self._device_frames.view(-1), table, self._pixels[:count])
        self._vision_stage(count)
        header = table.view(torch.int64)
        images = self._prefix_embeds[:, :self._image_tokens].unflatten(
            1, (self.num_cameras, self.dims.tokens_per_image))
        images.index_put_((header[:, 2], header[:, 3]), self._vision_out[:count])

    def _overlaps_first_step(self, guided: bool) -> bool:
        """Whether the prefix stage runs the first denoising step (not with the Jacobian)."""
        return self.options.overlap_first_step and not (guided and self._guidance.jacobian)

    def _prefix_stage(self, shape: tuple, guided: bool = False) -> None:
        batch, length = shape  # observations, prefix tokens (images + prompt bucket)
        overlap = self._overlaps_first_step(guided)
        # The side stream exists on CUDA with overlap_first_step only.
        side = self._overlap_stream if overlap else None
        after_kv = before_layer = None
        if side is not None:
            # Fork: the first denoising step needs the uploads queued before this stage, and
            # each of its layers the K/V that the prefix's layer of the same index writes.
            main = torch.cuda.current_stream(self.device)
            side.wait_stream(main)
            after_kv, before_layer = self._layer_handoff(main, side)
        prefix_forward(self.weights, self.dims, self._prefix_embeds[:batch, :length],
                       self._key_mask[:batch, ..., :length], self._cache_k, self._cache_v,
                       after_kv=after_kv)
        if overlap:
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                self._denoise_steps(shape, [0], self._noise, self._after_first_step,
                                    before_layer, guided)
            if side is not None:
                main.wait_stream(side)  # join

    def _layer_handoff(self, main, side) -> tuple:
        """Hooks: main records layer i's event after its K/V, side waits for it before layer i."""
        events = self._layer_events

        def after_kv(index):
            events[index].record(main)

        def before_layer(index):
            side.wait_event(events[index])

        return after_kv, before_layer

    def _denoise_stage(self, shape: tuple, guided: bool = False) -> None:
        # The steps after the prefix stage's (overlap_first_step), up to the tail's.
        first = 1 if self._overlaps_first_step(guided) else 0
        tail = self.options.denoise_tail_steps
        self._denoise_steps(shape, range(first, self.dims.num_steps - tail),
                            self._after_first_step if first else self._noise,
                            self._denoise_head if tail else self._chunk, None, guided)

    def _denoise_tail_stage(self, shape: tuple, guided: bool = False) -> None:
        steps = self.dims.num_steps
        self._denoise_steps(shape, range(steps - self.options.denoise_tail_steps, steps),
                            self._denoise_head, self._chunk, None, guided)

    def _denoise_steps(self, shape: tuple, steps, start: torch.Tensor, out: torch.Tensor,
                       before_layer=None, guided: bool = False) -> None:
        # Integrates from `start` into `out` (never in place across stages: a stage must give
        # the same result however often it runs, as graph capture runs it three times).
        batch, length = shape
        denoise_forward(self.weights, self.dims, start[:batch], self._state[:batch],
                        self._prefix_valid[:batch], self._key_mask[:batch, ..., :length],
                        self._cache_k, self._cache_v, out[:batch], steps=steps,
                        before_layer=before_layer,
                        guidance=self._guidance.rows(batch) if guided else None)

    def _stage_function(self, stage: str, size):
        # size: frames for 'vision' and 'frames'; (batch bucket, prefix tokens) for the
        # others. The guided stages run Real-Time Chunking (graphs of their own; the plain
        # ones are unchanged by it).
        body = {'vision': self._vision_stage, 'frames': self._frames_stage,
                'prefix': self._prefix_stage,
                'denoise': self._denoise_stage, 'denoise_tail': self._denoise_tail_stage,
                'prefix_rtc': lambda shape: self._prefix_stage(shape, guided=True),
                'denoise_rtc': lambda shape: self._denoise_stage(shape, guided=True),
                'denoise_tail_rtc': lambda shape: self._denoise_tail_stage(shape, guided=True),
                }[stage]

        def run():
            # The BLAS library is picked per GEMM when it is queued: graphs keep the capture's.
            with gemm.preferred_blas(self.device, self.dtype):
                body(size)
        return run

    def _run_stage(self, stage: str, size) -> None:
        if not self._use_graphs:
            self._stage_function(stage, size)()
            return
        graph = self._graphs.get((stage, size))
        if graph is None:
            graph = self._capture(stage, size)
        graph.replay()

    def _capture(self, stage: str, size):
        """Warm up on a side stream, then capture one stage for one static size."""
        function = self._stage_function(stage, size)
        if self._graph_pool is None:
            self._graph_pool = torch.cuda.graph_pool_handle()
            # One side stream for every capture: cuBLAS keeps a workspace per stream it has
            # run on, so a fresh stream per capture would pin one more workspace each time.
            self._capture_stream = torch.cuda.Stream(device=self.device)
        side = self._capture_stream
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                function()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._graph_pool):
            function()
        self._graphs[(stage, size)] = graph
        self._graph_thread = threading.get_ident()
        return graph

    # ----------------------------------------------------------------------------------------
    # Public API
    @property
    def stats(self) -> dict:
        """Cache hit counters, frames encoded ahead and the number of inference calls so far."""
        return dict(self._stats)

    def warmup(self) -> None:
        """
        Run every batch bucket once (captures CUDA graphs on GPU; call on the infer thread).

        Also resizes one frame of the largest size: the Triton resize kernel compiles on its
        first launch (about 0.5 s on a machine whose Triton cache is empty), which would
        otherwise delay the first frames.
        """
        self._check_open()
        with self._lock, torch.inference_mode():
            frames_stage = 'frames' if self._packed_frames else 'vision'
            encoded = None
            if self._packed_frames:
                # The frames stage writes features into the prefix from the table's rows (zero
                # rows: slot 0, camera 0); the features encoded so far are put back after it.
                self._host_table.clear()
                self._frame_table.zero_()
                encoded = self._prefix_embeds[:, :self._image_tokens].clone()
            else:
                self._prepare_pixels([(self.options.max_frame_height,
                                       self.options.max_frame_width)])
            for bucket in self._buckets:
                for count in range(1, bucket * self.num_cameras + 1) if self._use_graphs \
                        else [bucket * self.num_cameras]:
                    if (frames_stage, count) not in self._graphs:
                        self._warm_stage(frames_stage, count)
                stages = ('prefix', 'denoise')
                if self.options.rtc is not None:
                    stages += ('prefix_rtc', 'denoise_rtc')
                if self.options.denoise_tail_steps:
                    stages += tuple(stage.replace('denoise', 'denoise_tail') for stage in stages
                                    if stage.startswith('denoise'))
                for prompt in self._prompt_lengths:
                    for stage in stages:
                        self._warm_stage(stage, (bucket, self._image_tokens + prompt))
            if encoded is not None:
                self._prefix_embeds[:, :self._image_tokens].copy_(encoded)
            if self._is_cuda:
                torch.cuda.synchronize(self.device)

    def _warm_stage(self, stage: str, size) -> None:
        if self._use_graphs:
            if (stage, size) not in self._graphs:
                self._capture(stage, size)
        else:
            self._stage_function(stage, size)()

    def infer(self, frames, state, instruction, frame_keys=None, noise=None,
              rtc=None, on_gpu_tail=None) -> InferenceResult:
        """
        One observation -> InferenceResult (actions [chunk_size, action_dim] float32).

        rtc: an RTCRequest guides the chunk towards the previous one (Real-Time Chunking);
        one that cannot be used runs without guidance (result.rtc_applied, rtc_reason).
        on_gpu_tail: called once on this thread when all the device has left of the call is
        its denoising, or with EngineOptions.denoise_tail_steps its last that many Euler steps
        (e.g. to end its GPU turn: pi0_ros.engine.gpu_turns); not called when the call fails
        before.
        """
        return self._infer([(frames, state, instruction, frame_keys)], [noise], [rtc],
                           on_gpu_tail)[0]

    def infer_batch(self, observations, rtc=None, on_gpu_tail=None) -> list:
        """
        Several observations (frames, state, instruction, frame_keys) in one pass.

        A fifth tuple element, if given, is that observation's noise (as for infer()). rtc:
        None, or one RTCRequest or None per observation (a list of another length runs every
        observation without guidance, and each result says so). on_gpu_tail: as for infer().
        """
        observations = list(observations)
        if not observations:
            raise InputError('infer_batch needs at least one observation')
        if len(observations) > self.options.max_batch:
            raise InputError(f'{len(observations)} observations exceed max_batch '
                             f'{self.options.max_batch}')
        for index, observation in enumerate(observations):
            if not isinstance(observation, (tuple, list)) or len(observation) not in (3, 4, 5):
                raise InputError(f'observation {index} must be (frames, state, instruction'
                                 '[, frame_keys[, noise]])')
        padded = [tuple(o) + (None,) * (5 - len(o)) for o in observations]
        return self._infer([o[:4] for o in padded], [o[4] for o in padded],
                           self._batch_requests(rtc, len(observations)), on_gpu_tail)

    @staticmethod
    def _batch_requests(rtc, count: int) -> list:
        """Return one request per observation, or a reason (str) that covers them all."""
        if rtc is None:
            return [None] * count
        try:
            requests = list(rtc)
        except TypeError:
            return ['rtc must be a sequence of one RTCRequest or None per observation, got '
                    f'{type(rtc).__name__}'] * count
        if len(requests) != count:
            return [f'rtc has {len(requests)} entries for {count} observations'] * count
        return requests

    def normalize_actions(self, actions) -> np.ndarray:
        """
        Return actions in robot units [..., action_dim] in the model's normalized space.

        (actions - mean) / (std + eps), float32, as LeRobot's normalizer encodes them: the
        space of RTCRequest.prev_chunk and InferenceResult.normalized_actions. Only the
        action_dim real dims: the model's padded dims are never encoded from robot units
        (the engine pads them itself). Raises InputError if the last dim is not action_dim.
        """
        array = _as_float32('', 'actions', actions)
        if array.ndim < 1 or array.shape[-1] != self.action_dim:
            raise InputError(f'actions must have shape (..., {self.action_dim}), '
                             f'got {array.shape}')
        return ((array - self._action_stats.mean) / self._action_denominator).astype(
            np.float32)

    def encode_frames(self, frames: dict, frame_keys: dict, slot: int = 0) -> int:
        """
        Encode camera frames ahead of the observation they belong to; return how many ran.

        frames and frame_keys map camera index -> HxWx3 uint8 frame / its hashable key (not
        None). A later infer() (or infer_batch() observation `slot`) that names the same key
        for that camera reuses these features instead of encoding the frame on its critical
        path; a camera whose key is already encoded in that slot is skipped. Blocks until the
        features are computed.
        """
        self._check_open()
        if set(frames) != set(frame_keys):
            raise InputError('frames and frame_keys must name the same cameras')
        slot = _index('slot', slot, self.options.max_batch)
        cameras = {_index('camera index', cam, self.num_cameras): (frame, frame_keys[cam])
                   for cam, frame in frames.items()}
        pending = []
        for cam in sorted(cameras):
            frame, key = cameras[cam]
            self._check_frame('', cam, frame)
            self._check_frame_key('', key)
            if key is None:
                raise InputError(f'camera {cam}: a frame encoded ahead needs a key')
            pending.append((slot, cam, key, frame))
        with self._lock, torch.inference_mode():
            self._check_open()
            pending = [item for item in pending
                       if self._slot_frame_keys[slot][item[1]] != item[2]]
            self._encode_pending(pending, lambda: None)
            if self._is_cuda:
                torch.cuda.current_stream(self.device).synchronize()
            self._remember_frame_keys(pending)
            self._stats['frames_encoded_ahead'] += len(pending)
        return len(pending)

    def close(self) -> None:
        """Free weights, buffers and graphs (GPU memory is returned to the allocator)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._graphs.clear()
            self._graph_pool = None
            self._capture_stream = None
            for name in [n for n, v in vars(self).items() if isinstance(v, torch.Tensor)]:
                setattr(self, name, None)
            self.weights = None
            self._resizer = None
            # Views of the pinned staging buffer: it is freed once they are gone too.
            self._host_table = self._host_frames = self._host_frames_bytes = None
            self._copy_stream = None
            self._overlap_stream = None
            self._layer_events = None
            if self._is_cuda:
                torch.cuda.synchronize(self.device)
                torch.cuda.empty_cache()

    # ----------------------------------------------------------------------------------------
    # Validation
    def _check_open(self) -> None:
        if self._closed:
            raise EngineError('engine is closed')

    def _check_frame(self, where: str, cam: int, frame) -> None:
        o = self.options
        if not isinstance(frame, np.ndarray):
            raise InputError(f'{where}frame {cam} must be a numpy array, '
                             f'got {type(frame).__name__}')
        if frame.dtype != np.uint8:
            raise InputError(f'{where}frame {cam} must be uint8, got {frame.dtype}')
        if frame.ndim != 3 or frame.shape[2] != 3:
            raise InputError(f'{where}frame {cam} must be HxWx3 RGB, got {frame.shape}')
        if frame.shape[0] < 1 or frame.shape[1] < 1:
            raise InputError(f'{where}frame {cam} is empty: {frame.shape}')
        if frame.shape[0] > o.max_frame_height or frame.shape[1] > o.max_frame_width:
            raise InputError(f'{where}frame {cam} is {frame.shape[1]}x{frame.shape[0]}, '
                             f'larger than the maximum {o.max_frame_width}x'
                             f'{o.max_frame_height}')
        if min(frame.shape[:2]) * self.dims.image_size < max(frame.shape[:2]):
            # Resized with its aspect ratio kept, the short side would be less than a pixel.
            raise InputError(f'{where}frame {cam} is {frame.shape[1]}x{frame.shape[0]}: more '
                             f'than {self.dims.image_size}:1, too thin to resize to '
                             f'{self.dims.image_size}x{self.dims.image_size}')

    @staticmethod
    def _check_frame_key(where: str, key) -> None:
        try:
            hash(key)
        except TypeError as error:
            raise InputError(f'{where}frame keys must be hashable: {error}') from error

    def _validate(self, index: int, frames, state, instruction, frame_keys, noise) -> tuple:
        where = f'observation {index}: ' if index else ''
        if isinstance(frames, np.ndarray) or not hasattr(frames, '__len__'):
            raise InputError(f'{where}frames must be a sequence of {self.num_cameras} arrays')
        if len(frames) != self.num_cameras:
            raise InputError(f'{where}expected {self.num_cameras} camera frames, '
                             f'got {len(frames)}')
        for cam, frame in enumerate(frames):
            self._check_frame(where, cam, frame)
        state = _as_float32(where, 'state', state)
        if state.shape != (self.state_dim,):
            raise InputError(f'{where}state must have shape ({self.state_dim},), '
                             f'got {state.shape}')
        if not np.isfinite(state).all():
            raise InputError(f'{where}state holds non-finite values')
        if not isinstance(instruction, str) or not instruction.strip():
            raise InputError(f'{where}instruction must be a non-empty string')
        try:
            instruction.encode('utf-8')
        except UnicodeEncodeError as error:
            raise InputError(f'{where}instruction is not valid text: {error}') from error
        if frame_keys is not None:
            if isinstance(frame_keys, (str, bytes, Mapping, AbstractSet)) \
                    or not hasattr(frame_keys, '__len__') or len(frame_keys) != self.num_cameras:
                raise InputError(f'{where}frame_keys must be None or a sequence of '
                                 f'{self.num_cameras} keys')
            frame_keys = list(frame_keys)
            for key in frame_keys:
                self._check_frame_key(where, key)
        if noise is not None:
            noise = _as_float32(where, 'noise', noise)
            expected = (self.chunk_size, self.dims.max_action_dim)
            if noise.shape != expected:
                raise InputError(f'{where}noise must have shape {expected}, got {noise.shape}')
            if not np.isfinite(noise).all():
                raise InputError(f'{where}noise holds non-finite values')
        return frames, state, instruction, frame_keys, noise

    # ----------------------------------------------------------------------------------------
    # Inference
    def _encode_pending(self, pending: list, preprocessed) -> None:
        """
        Upload, resize and encode the frames of pending [(slot, cam, key, frame)].

        Each camera's features go into its slot's image tokens of the prefix embeddings; its
        key is forgotten until _remember_frame_keys (the features are being replaced).
        preprocessed() is called once the first frames are on the device (even with none).
        """
        for slot, cam, _, _ in pending:
            self._slot_frame_keys[slot][cam] = None
        if self._packed_frames:
            self._encode_packed(pending, preprocessed)
            return
        groups = self._upload_groups(pending)
        tokens = self.dims.tokens_per_image
        for start, stop in groups:
            self._upload(pending, start, stop, pipelined=len(groups) > 1)
            self._prepare_pixels([item[3].shape[:2] for item in pending[start:stop]], start)
            if start == 0:
                preprocessed()
            self._run_stage('vision', stop - start)
            # One copy per run of a slot's consecutive cameras (their image tokens are adjacent
            # in the prefix): every launch from Python waits for the GIL on a busy host.
            for first, last, slot, cam in _camera_runs(pending[start:stop]):
                self._prefix_embeds[slot, cam * tokens:(cam + last - first) * tokens].copy_(
                    self._vision_out[first:last].flatten(0, 1))
        if not pending:
            preprocessed()

    def _encode_packed(self, pending: list, preprocessed) -> None:
        """
        Frames back to back in pinned memory with their table rows, one upload, one graph.

        Two launches from Python whatever the number of frames: on a busy host each launch
        waits for the GIL.
        """
        if not pending:
            preprocessed()
            return
        offset = 0
        for index, (slot, cam, _, frame) in enumerate(pending):
            self._host_table.write(index, frame.shape[0], frame.shape[1], offset, slot, cam)
            offset = copy_frame_bytes(frame, self._host_frames, self._host_frames_bytes, offset)
        used = self._table_bytes + offset
        self._frame_staging[:used].copy_(self._host_frame_staging[:used],
                                         non_blocking=self._is_cuda)
        preprocessed()
        self._run_stage('frames', len(pending))

    def _remember_frame_keys(self, pending: list) -> None:
        """Record the keys of encoded frames (after their features were computed)."""
        for slot, cam, key, _ in pending:
            self._slot_frame_keys[slot][cam] = key

    def _infer(self, observations: list, noises: list, requests: list,
               on_gpu_tail=None) -> list:
        self._check_open()
        call_start = time.perf_counter()
        checked = [self._validate(i, *obs, noise)
                   for i, (obs, noise) in enumerate(zip(observations, noises))]
        # Real-Time Chunking requests are checked, never raise: [(plan or None, reason)].
        plans = [(None, request) if isinstance(request, str)
                 else plan_guidance(request, self.dims, self.action_dim, self._rtc_options)
                 for request in requests]
        with self._lock, torch.inference_mode():
            self._check_open()
            return self._infer_locked(checked, plans, call_start, on_gpu_tail)

    def _load_guidance(self, plans: list, bucket: int) -> None:
        """Fill the guidance buffers of the bucket's slots (zero weights: no guidance)."""
        prev = self._host_rtc_prev.numpy()
        weights = self._host_rtc_weights.numpy()
        guidance = self._host_rtc_guidance.numpy()
        prev[:bucket] = 0.0
        weights[:bucket] = 0.0
        guidance[:bucket] = 0.0
        for slot, (plan, _) in enumerate(plans):
            if plan is not None:
                prev[slot] = plan.prev
                weights[slot, :, 0] = plan.weights
                guidance[slot] = plan.guidance
        for device, host in ((self._rtc_prev, self._host_rtc_prev),
                             (self._rtc_weights, self._host_rtc_weights),
                             (self._rtc_guidance, self._host_rtc_guidance)):
            device[:bucket].copy_(host[:bucket], non_blocking=True)

    def _run_denoising(self, shape: tuple, batch: int, guided: bool, marks: dict,
                       on_gpu_tail=None) -> None:
        """
        Run the prefix and denoise stages (guided or plain), with their marks and events.

        on_gpu_tail() is called once the device has run everything before the tail: the
        prefix, or the denoising but its last denoise_tail_steps steps (on a GPU the rest and
        the chunk's copy are queued first, so the device has work while it runs).
        """
        cuda = self._is_cuda
        rtc = '_rtc' if guided else ''
        tail = self.options.denoise_tail_steps > 0

        def tail_begins():
            # Everything before the tail is queued: on a GPU an event marks the point.
            if cuda:
                self._events['tail'].record()
            elif on_gpu_tail is not None:
                on_gpu_tail()
        self._run_stage('prefix' + rtc, shape)
        marks['prefix'] = time.perf_counter()
        if cuda:
            self._events['prefix'].record()
        if not tail:
            tail_begins()
        self._run_stage('denoise' + rtc, shape)
        if tail:
            tail_begins()
            self._run_stage('denoise_tail' + rtc, shape)
        marks['denoise'] = time.perf_counter()
        if cuda:
            self._events['denoise'].record()
            self._host_chunk[:batch].copy_(self._chunk[:batch], non_blocking=True)
            if on_gpu_tail is not None:
                self._events['tail'].synchronize()
                on_gpu_tail()
            torch.cuda.current_stream(self.device).synchronize()  # the chunk and every event

    def _unnormalize(self, chunk: np.ndarray) -> np.ndarray:
        with np.errstate(over='ignore', invalid='ignore'):
            return chunk[..., :self.action_dim] * self._action_stats.std \
                + self._action_stats.mean

    def _infer_locked(self, checked: list, plans: list, call_start: float,
                      on_gpu_tail=None) -> list:
        d = self.dims
        batch = len(checked)
        bucket = next(b for b in self._buckets if b >= batch)
        cuda = self._is_cuda
        if cuda:
            self._events['start'].record()
        # Language: tokenize + embed only when a slot's instruction changed.
        for slot, (_, _, instruction, _, _) in enumerate(checked):
            if self._slot_instructions[slot] == instruction:
                self._stats['language_cache_hits'] += 1
                continue
            self._slot_instructions[slot] = None
            ids, mask = tokenize_prompt(self._tokenizer, instruction, d.tokenizer_max_length)
            if ids.max(initial=0) >= d.vocab_size or ids.min(initial=0) < 0:
                raise InputError(f'tokenizer produced ids outside the vocabulary '
                                 f'(0..{d.vocab_size - 1})')
            self._host_tokens[slot].numpy()[:] = ids
            self._host_token_mask[slot].numpy()[:] = mask
            self._host_prefix_valid.numpy()[slot] = self._image_tokens + int(mask.sum())
            self._tokens[slot].copy_(self._host_tokens[slot], non_blocking=True)
            language_mask = self._key_mask[slot, 0, 0, self._image_tokens:]
            language_mask.copy_(self._host_token_mask[slot], non_blocking=True)
            self._prefix_valid[slot].copy_(self._host_prefix_valid[slot], non_blocking=True)
            language = self._prefix_embeds[slot, self._image_tokens:]
            torch.index_select(self.weights.embed_tokens, 0, self._tokens[slot], out=language)
            language.mul_(self.weights.embed_scale)
            self._slot_instructions[slot] = instruction
        # Frames first: only cameras whose key changed are copied, resized and encoded. The GPU
        # starts on them while the host writes the state and noise (each launch from Python may
        # wait for the GIL on a busy host).
        pending = []
        hits = [0] * batch
        for slot, (frames, _, _, keys, _) in enumerate(checked):
            for cam in range(self.num_cameras):
                key = None if keys is None else keys[cam]
                if key is not None and self._slot_frame_keys[slot][cam] == key:
                    hits[slot] += 1
                    continue
                pending.append((slot, cam, key, frames[cam]))
        marks = {}

        def preprocessed():
            marks['preprocess'] = time.perf_counter()
            if cuda:
                self._events['preprocess'].record()

        self._encode_pending(pending, preprocessed)
        # State (normalized on the host in float32, as LeRobot's normalizer computes it).
        host_state = self._host_state.numpy()
        for slot, (_, state, _, _, noise) in enumerate(checked):
            host_state[slot, :self.state_dim] = (state - self._state_stats.mean) \
                / self._state_denominator
            host_state[slot, self.state_dim:] = 0.0
        self._state[:batch].copy_(self._host_state[:batch], non_blocking=True)
        # Noise: given per observation, or drawn from the engine's generator.
        if any(noise is None for *_, noise in checked):
            torch.randn(self._noise[:bucket].shape, generator=self._generator,
                        out=self._noise[:bucket])
        for slot, (*_, noise) in enumerate(checked):
            if noise is not None:
                self._host_noise[slot].numpy()[:] = noise
                self._noise[slot].copy_(self._host_noise[slot], non_blocking=True)
        marks['vision'] = time.perf_counter()
        if cuda:
            self._events['vision'].record()
        # The prefix ends after the longest prompt of the call, in its prompt bucket (padding
        # slots of the batch bucket are cut there too: their results are discarded).
        longest = int(self._host_prefix_valid.numpy()[:batch].max()) - self._image_tokens
        shape = (bucket, self._image_tokens
                 + next(n for n in self._prompt_lengths if n >= longest))
        guided = any(plan is not None for plan, _ in plans)
        if guided:
            self._load_guidance(plans, bucket)
        self._run_denoising(shape, batch, guided, marks, on_gpu_tail)
        self._remember_frame_keys(pending)
        chunk = self._host_chunk[:batch].numpy()
        reasons = [reason for _, reason in plans]
        if guided:
            # A guided chunk that is not finite (or overflows in robot units) is made again
            # without guidance for its observation: bad guidance input never fails a call.
            failed = [slot for slot, (plan, _) in enumerate(plans) if plan is not None
                      and not (np.isfinite(chunk[slot]).all()
                               and np.isfinite(self._unnormalize(chunk[slot])).all())]
            if failed:
                for slot in failed:
                    plans[slot] = (None, None)
                    reasons[slot] = 'the guided chunk was not finite; made without guidance'
                guided = any(plan is not None for plan, _ in plans)
                if guided:
                    self._load_guidance(plans, bucket)
                # on_gpu_tail was called: this rare rerun may share the device with others.
                self._run_denoising(shape, batch, guided, marks)
                chunk = self._host_chunk[:batch].numpy()
        if not np.isfinite(chunk).all():
            raise NonFiniteOutputError(f'the action chunk holds non-finite values '
                                       f'(precision {self.dtype}); no actions returned')
        actions = self._unnormalize(chunk)
        if not np.isfinite(actions).all():
            raise NonFiniteOutputError('unnormalized actions overflowed; no actions returned')
        total = (time.perf_counter() - call_start) * 1e3
        if cuda:
            events = self._events
            timings = {'preprocess': events['start'].elapsed_time(events['preprocess']),
                       'vision': events['preprocess'].elapsed_time(events['vision']),
                       'prefix': events['vision'].elapsed_time(events['prefix']),
                       'denoise': events['prefix'].elapsed_time(events['denoise'])}
        else:
            timings = {'preprocess': (marks['preprocess'] - call_start) * 1e3,
                       'vision': (marks['vision'] - marks['preprocess']) * 1e3,
                       'prefix': (marks['prefix'] - marks['vision']) * 1e3,
                       'denoise': (marks['denoise'] - marks['prefix']) * 1e3}
        timings['total'] = total
        self._stats['calls'] += 1
        self._stats['vision_cache_hits'] += sum(hits)
        return [InferenceResult(actions=np.array(actions[slot], dtype=np.float32),
                                timings_ms=dict(timings), vision_cache_hits=hits[slot],
                                normalized_actions=np.array(chunk[slot, :, :self.action_dim],
                                                            dtype=np.float32),
                                rtc_applied=plans[slot][0] is not None,
                                rtc_reason=reasons[slot])
                for slot in range(batch)]


__all__ = ['Pi0Engine', 'batch_buckets', 'device_buffer_shapes', 'resolve_device',
           'resolve_dtype']
