# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The action expert's layers at batch 1 as six kernels instead of nine (CUDA thread-block clusters).

The stack of fused Triton kernels spends each expert layer in nine dependent launches; two of
them (add + RMSNorm) and the RoPE kernel exist only to add up the float32 split-K partials of
the projection before them. cluster_expert.cu adds the partials up on chip instead: a cluster
of blocks splits K, the blocks exchange their partial products through distributed shared
memory, and the cluster finishes the tile itself:

  qkv      RMSNorm of the residual stream in the prologue, RoPE and the K/V cache rows in the
           epilogue
  attention, merge   (attention.py, unchanged)
  o        added into the residual stream
  gate/up  RMSNorm in the prologue, GELU(gate) * up in the epilogue
  down     added into the residual stream

The kernels are compiled at run time by NVRTC (PyTorch's torch.cuda._compile_kernel; the CUDA
headers come with PyTorch's CUDA wheels) and launched as programmatic dependents (PDL), like
the Triton kernels around them. bf16, one observation (at most 64 rows), Hopper or newer.
"""
import ctypes
from dataclasses import dataclass
import functools
import os

import torch

from pi0_ros.engine import kernel_configs, kernels
from pi0_ros.engine.attention import attention

SOURCE_PATH = os.path.join(os.path.dirname(__file__), 'cluster_expert.cu')
WEIGHTS = {'qkv': 'qkv_w', 'o': 'out_w', 'gate_up': 'gate_up_w', 'down': 'down_w'}
MAX_ROWS = 64
MODE_QKV, MODE_RESID, MODE_GELU = 0, 1, 2
_PDL_ATTRIBUTE = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


@dataclass(frozen=True)
class Variant:
    """One compiled projection: mode, cluster size (K splits), tile columns, K, warps."""

    mode: int
    cluster: int
    block_n: int
    k_dim: int
    warps: int
    head_dim: int = 256
    q_heads: int = 8
    ablate: int = 0  # measurement only (cluster_expert.cu's ABLATE)

    @property
    def k_slice(self) -> int:
        """Return the K elements per block of a cluster."""
        return self.k_dim // self.cluster

    @property
    def name(self) -> str:
        """Return the kernel's symbol."""
        return (f'cluster_expert_m{self.mode}_c{self.cluster}_n{self.block_n}_k{self.k_dim}'
                f'_w{self.warps}_h{self.head_dim}x{self.q_heads}_a{self.ablate}')

    @property
    def shared_bytes(self) -> int:
        """Bytes of dynamic shared memory: weight slab (then partial product), rows, stats."""
        slab = max(self.block_n * (self.k_slice + 8) * 2, MAX_ROWS * (self.block_n + 4) * 4)
        rows_per_rank = MAX_ROWS // self.cluster
        stats = rows_per_rank * (max(self.block_n // 32, 1) + 1)
        return slab + MAX_ROWS * (self.k_slice + 8) * 2 + 4 * stats

    def source(self) -> str:
        """Return the CUDA text with this variant's constants defined."""
        with open(SOURCE_PATH) as handle:
            body = handle.read()
        defines = {'MODE': self.mode, 'CLUSTER': self.cluster, 'BLOCK_N': self.block_n,
                   'K_SLICE': self.k_slice, 'K_DIM': self.k_dim, 'WARPS': self.warps,
                   'HEAD_DIM': self.head_dim, 'Q_HEADS': self.q_heads, 'ABLATE': self.ablate,
                   'KERNEL_NAME': self.name}
        return ''.join(f'#define {key} {value}\n' for key, value in defines.items()) + body


def layer_variants(width: int, heads: int, head_dim: int, mlp: int, ablate: int = 0) -> dict:
    """Return the four projections of an expert layer of these dimensions (kernel_configs)."""
    tiles = kernel_configs.CLUSTER_EXPERT_TILES
    return {
        'qkv': Variant(MODE_QKV, tiles['qkv_cluster'], 64, width, tiles['qkv_warps'],
                       head_dim, heads, ablate),
        'o': Variant(MODE_RESID, tiles['o_cluster'], tiles['o_block_n'], heads * head_dim,
                     tiles['o_warps'], head_dim, heads, ablate),
        'gate_up': Variant(MODE_GELU, tiles['gate_up_cluster'], tiles['gate_up_block_n'],
                           width, tiles['gate_up_warps'], head_dim, heads, ablate),
        'down': Variant(MODE_RESID, tiles['down_cluster'], tiles['down_block_n'], mlp,
                        tiles['down_warps'], head_dim, heads, ablate),
    }


def _include_dirs() -> list:
    """CUDA headers of PyTorch's CUDA wheels (nvidia/cu13/include), where they exist."""
    try:
        import nvidia
    except ImportError:
        return []
    found = []
    for root in nvidia.__path__:
        for sub in ('cu13', 'cuda_runtime'):
            path = os.path.join(root, sub, 'include')
            if os.path.isfile(os.path.join(path, 'cuda_bf16.h')):
                found.append(path)
    return found


@functools.lru_cache(maxsize=None)
def compile_variant(variant: Variant, compute_capability: str):
    """Compile one variant with NVRTC; returns PyTorch's kernel handle (module loaded)."""
    kernel = torch.cuda._compile_kernel(variant.source(), variant.name,
                                        compute_capability=compute_capability,
                                        cuda_include_dirs=_include_dirs(),
                                        nvcc_options=['-std=c++17'])
    kernel.set_shared_memory_config(variant.shared_bytes)
    return kernel


def compile_to_cubin(variant: Variant, compute_capability: str = '90') -> bytes:
    """Compile one variant to a cubin without a GPU (NVRTC only): for tests and checks."""
    from torch.cuda._utils import _nvrtc_compile
    cubin, _ = _nvrtc_compile(variant.source(), variant.name, compute_capability,
                              _include_dirs(), ['-std=c++17'])
    return cubin


class _LaunchAttribute(ctypes.Structure):
    _fields_ = [('id', ctypes.c_int), ('pad', ctypes.c_char * 4),
                ('value', ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [('grid_x', ctypes.c_uint), ('grid_y', ctypes.c_uint), ('grid_z', ctypes.c_uint),
                ('block_x', ctypes.c_uint), ('block_y', ctypes.c_uint),
                ('block_z', ctypes.c_uint), ('shared_bytes', ctypes.c_uint),
                ('stream', ctypes.c_void_p), ('attributes', ctypes.POINTER(_LaunchAttribute)),
                ('attribute_count', ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def _driver():
    from torch.cuda._utils import _get_gpu_runtime_library
    library = _get_gpu_runtime_library()
    library.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.c_void_p]
    return library


def launch(variant: Variant, tiles: int, args: list, device: torch.device) -> None:
    """Launch tiles clusters of a variant on the current stream (PDL on), args in order."""
    kernel = compile_variant(variant, _capability(device))
    values = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            values.append(ctypes.c_void_p(arg.data_ptr()))
        elif isinstance(arg, float):
            values.append(ctypes.c_float(arg))
        else:
            values.append(ctypes.c_int(arg))
    pointers = (ctypes.c_void_p * len(values))(
        *[ctypes.cast(ctypes.byref(value), ctypes.c_void_p) for value in values])
    attribute = _LaunchAttribute(id=_PDL_ATTRIBUTE)
    attribute.value[0] = 1 if kernel_configs.PDL else 0
    config = _LaunchConfig(tiles * variant.cluster, 1, 1, variant.warps * 32, 1, 1,
                           variant.shared_bytes,
                           ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream),
                           ctypes.pointer(attribute), 1)
    result = _driver().cuLaunchKernelEx(ctypes.byref(config), kernel.func, pointers, None)
    if result != 0:
        raise RuntimeError(f'cluster_expert: cuLaunchKernelEx failed ({result}) for '
                           f'{variant.name}')


@functools.lru_cache(maxsize=None)
def _capability(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f'{major}{minor}'


def supported(layers: list, rows: int, width: int, heads: int, head_dim: int, mlp: int,
              dtype: torch.dtype, device: torch.device) -> bool:
    """Tell whether the expert stack runs on these kernels (kernel_configs.CLUSTER_EXPERT)."""
    if not (kernel_configs.CLUSTER_EXPERT and device.type == 'cuda'
            and dtype == torch.bfloat16 and 0 < rows <= MAX_ROWS
            and torch.cuda.get_device_capability(device) >= (9, 0)):
        return False
    variants = layer_variants(width, heads, head_dim, mlp)
    shapes_ok = (width % (variants['qkv'].cluster * 128) == 0 and head_dim % 64 == 0
                 and (heads * head_dim) % (variants['o'].cluster * 16) == 0
                 and width % variants['o'].block_n == 0
                 and mlp % (variants['gate_up'].block_n // 2) == 0
                 and width % (variants['gate_up'].cluster * 128) == 0
                 and mlp % (variants['down'].cluster * 16) == 0
                 and width % variants['down'].block_n == 0)
    return shapes_ok and all(
        isinstance(getattr(layer, name), torch.Tensor) and getattr(layer, name).dtype == dtype
        for layer in layers for name in ('qkv_w', 'out_w', 'gate_up_w', 'down_w'))


def expert_stack(layers: list, x: torch.Tensor, eps: float, heads: int, head_dim: int,
                 cos: torch.Tensor, sin: torch.Tensor, cache_k: torch.Tensor,
                 cache_v: torch.Tensor, start: int, bias: torch.Tensor, state_keys: int,
                 final_out: torch.Tensor = None, before_layer=None, ablate: int = 0,
                 only: str = None) -> None:
    """
    Run the expert's layers over x [1, S, W] float32 (the residual stream, in place).

    As model._gemma_stack for one observation: K/V of positions start..start+S into the
    caches, attention over cache positions 0..start+S with the key bias, the state token's
    queries (the first heads rows) seeing only keys before state_keys; final_out, if given,
    receives the RMS-normalized output. ablate and only (a projection's name: launch only
    that one) are for measurements.
    """
    _, seq, width = x.shape
    stream = x.view(seq, width)
    device = x.device
    mlp = layers[0].down_w.shape[1]
    variants = layer_variants(width, heads, head_dim, mlp, ablate)
    dtype = cache_k.dtype
    queries = torch.empty(seq, heads * head_dim, dtype=dtype, device=device)
    hidden = torch.empty(seq, mlp, dtype=dtype, device=device)
    # The residual stream as bf16 rows and, per column tile of the projection that last added
    # into it, the rows' sums of squares: the next projection's input and normalization.
    rows = torch.empty(seq, width, dtype=dtype, device=device)
    o_tiles = width // variants['o'].block_n
    down_tiles = width // variants['down'].block_n
    sumsq_o = torch.empty(o_tiles, MAX_ROWS, dtype=torch.float32, device=device)
    sumsq_down = torch.empty(down_tiles, MAX_ROWS, dtype=torch.float32, device=device)
    attended = queries  # stands in for the attention output when only one projection runs

    def run(name, tiles, a, out, sumsq_in, sumsq_out, sumsq_tiles, keys=queries,
            values=queries, up_offset=0, cache_stride=0):
        if only in (None, name):
            launch(variants[name], tiles,
                   [getattr(layer, WEIGHTS[name]), a, stream, out, keys, values, cos, sin,
                    sumsq_in, sumsq_out, seq, width, up_offset, cache_stride, sumsq_tiles,
                    eps], device)

    for index, layer in enumerate(layers):
        if before_layer is not None:
            before_layer(index)
        keys = cache_k[index, 0, 0, start:start + seq]
        values = cache_v[index, 0, 0, start:start + seq]
        if index == 0:  # the action side wrote the stream: normalized rows, no row factor
            kernels.add_rms_norm(stream, None, rows, eps)
        run('qkv', (heads + 2) * head_dim // 64, rows, queries, sumsq_down, sumsq_down,
            0 if index == 0 else down_tiles, keys, values, cache_stride=keys.stride(0))
        if only in (None, 'attention'):
            attended = attention(queries.view(1, seq * heads, head_dim),
                                 cache_k[index, :1, 0, :start + seq],
                                 cache_v[index, :1, 0, :start + seq], bias, head_dim ** -0.5,
                                 state_rows=heads, state_keys=state_keys)
        run('o', o_tiles, attended, rows, sumsq_o, sumsq_o, 0)
        run('gate_up', mlp // (variants['gate_up'].block_n // 2), rows, hidden, sumsq_o,
            sumsq_o, o_tiles, up_offset=mlp)
        run('down', down_tiles, hidden, rows, sumsq_down, sumsq_down, 0)
    if final_out is not None:
        kernels.add_rms_norm(stream, None, final_out.view(seq, width), eps)
