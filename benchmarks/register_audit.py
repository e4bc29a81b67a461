# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Registers, spills and shared memory of every Triton kernel the engine launches, for sm_90a, on
a machine without a GPU.

The engine runs on the CPU at the full model's widths (fewer layers: each layer launches the
same kernels) with the Triton path on, PDL and TMA as on a Hopper GPU. Each launch is compiled
by Triton for sm_90a (capability 9.0) through its own binder, so the specialization (constexprs,
16-byte alignment of pointers and integers) is the one a GPU run gets, and nothing is launched:
the kernels' outputs stay uninitialized, so the chunks are garbage and only the launches
count. ptxas (Triton's bundled one) then reports each distinct compilation's registers and
spills; Triton's metadata its shared memory (over sm_90's 227 KiB a launch fails).

    python benchmarks/register_audit.py --batches 1,8 --out benchmarks/register_audit.json

What it cannot see: kernels that only CUDA tensors reach (none in the engine at the time of
writing: every Triton path is gated on kernels.use_triton, which the CPU run turns on), and
timing. A spill is worth a look before a GPU run, not proof of a slow kernel.
"""
import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.pop('TRITON_INTERPRET', None)  # compiled kernels, not the interpreter's stand-ins

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

HOPPER = GPUTarget('cuda', 90, 32)
# Shared memory one block may ask for on sm_90 (H100/H200: 227 KiB); more fails at launch.
SHARED_LIMIT_BYTES = 232448
PTXAS = Path(triton.__file__).parent / 'backends' / 'nvidia' / 'bin' / 'ptxas'


class _HopperWithoutGpu:
    """The part of Triton's driver interface that compiling (not launching) asks for."""

    def get_current_target(self):
        return HOPPER

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device('cpu')


@dataclasses.dataclass
class Compilation:
    kernel: str
    num_warps: int
    num_stages: int
    constexprs: dict
    shared_bytes: int
    ptx: str
    grids: set = dataclasses.field(default_factory=set)
    batches: set = dataclasses.field(default_factory=set)


def _constexpr_value(value):
    return value if isinstance(value, (bool, int, float, str)) or value is None else repr(value)


class LaunchRecorder:
    """Replaces JITFunction.run: compiles each launch for sm_90a, launches nothing."""

    def __init__(self):
        self.compilations = {}
        self.batch = None
        self._run = JITFunction.run

    def __enter__(self):
        self._previous_driver = driver._active
        driver.set_active(_HopperWithoutGpu())
        recorder = self

        def run(jit_fn, *args, grid, warmup, **kwargs):
            kernel = recorder._run(jit_fn, *args, grid=grid, warmup=True, **kwargs)
            recorder._record(jit_fn, kernel, grid, args, kwargs)
            return kernel

        JITFunction.run = run
        return self

    def __exit__(self, *exc):
        JITFunction.run = self._run
        driver._active = self._previous_driver  # reset_active() would look for a GPU

    def _record(self, jit_fn, kernel, grid, args, kwargs):
        if callable(grid):
            grid = grid(dict(zip(jit_fn.arg_names, args), **kwargs))
        key = kernel.hash
        if key not in self.compilations:
            constexprs = {jit_fn.arg_names[path[0]]: _constexpr_value(value)
                          for path, value in kernel.src.constants.items() if len(path) == 1}
            self.compilations[key] = Compilation(
                kernel=jit_fn.fn.__name__, num_warps=kernel.metadata.num_warps,
                num_stages=kernel.metadata.num_stages, constexprs=constexprs,
                shared_bytes=kernel.metadata.shared, ptx=kernel.asm['ptx'])
        entry = self.compilations[key]
        entry.grids.add(tuple(int(g) for g in grid))
        entry.batches.add(self.batch)


_PTXAS_USED = re.compile(r'Used (\d+) registers')
_PTXAS_SPILLS = re.compile(r'(\d+) bytes stack frame, (\d+) bytes spill stores, '
                           r'(\d+) bytes spill loads')


def ptxas_usage(ptx: str) -> dict:
    """Registers, stack frame and spill bytes per thread that ptxas -v reports for sm_90a."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / 'kernel.ptx'
        source.write_text(ptx)
        result = subprocess.run(
            [str(PTXAS), '-v', '--gpu-name', 'sm_90a', str(source), '-o', str(Path(tmp) / 'k.o')],
            capture_output=True, text=True, check=True)
    report = result.stderr + result.stdout
    registers = _PTXAS_USED.search(report)
    spills = _PTXAS_SPILLS.search(report)
    if registers is None or spills is None:
        raise RuntimeError(f'unexpected ptxas report:\n{report}')
    return {'registers': int(registers.group(1)), 'stack_bytes': int(spills.group(1)),
            'spill_store_bytes': int(spills.group(2)), 'spill_load_bytes': int(spills.group(3))}


def build_engine(max_batch: int, layers: int, precision: str, options: dict):
    """A random full-width engine on the CPU with the Triton path on, as on an H100/H200."""
    from pi0_ros.engine import Pi0Engine, kernel_configs, kernels
    from pi0_ros.engine.config import EngineOptions, ModelDims

    kernels.INTERPRET_ON_CPU = True  # use_triton: on for CPU tensors; use_tma follows it
    kernels.use_pdl = lambda tensor: kernel_configs.PDL and kernels.triton is not None
    kernel_configs.ACTION_LINEAR_TRITON = True
    dims = dataclasses.replace(ModelDims.full(), vision_depth=layers, prefix_depth=layers,
                               expert_depth=layers)
    return Pi0Engine.random(dims, state_dim=14, action_dim=14, num_cameras=3,
                            options=EngineOptions(device='cpu', precision=precision,
                                                  max_batch=max_batch, max_frame_height=480,
                                                  max_frame_width=640, **options))


def record_launches(batches, layers: int, precision: str, options: dict) -> LaunchRecorder:
    """Run one call per batch size under the recorder; return it with every compilation."""
    rng = np.random.default_rng(0)
    with LaunchRecorder() as recorder:
        engine = build_engine(max(batches), layers, precision, options)
        for batch in batches:
            recorder.batch = batch
            observations = [([rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
                              for _ in range(3)], rng.uniform(-1, 1, 14), 'pick up the cube',
                             None, None) for _ in range(batch)]
            try:
                engine.infer_batch(observations)
            except Exception as error:  # noqa: BLE001 - garbage outputs may be rejected
                print(f'batch {batch}: the call ended with {type(error).__name__} (expected: '
                      'nothing ran, so its outputs are garbage)', file=sys.stderr)
    return recorder


def audit(recorder: LaunchRecorder) -> list:
    rows = []
    for compilation in recorder.compilations.values():
        rows.append({
            'kernel': compilation.kernel, 'batches': sorted(compilation.batches),
            'grids': sorted(compilation.grids), 'num_warps': compilation.num_warps,
            'num_stages': compilation.num_stages, 'shared_bytes': compilation.shared_bytes,
            'constexprs': compilation.constexprs, **ptxas_usage(compilation.ptx)})
    rows.sort(key=lambda row: (row['kernel'], row['batches'], row['num_warps']))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--batches', default='1,8', help='comma-separated batch sizes')
    parser.add_argument('--layers', type=int, default=2,
                        help='layers per tower (each layer launches the same kernels)')
    parser.add_argument('--precision', default='bf16', choices=('bf16', 'fp16'))
    parser.add_argument('--prefix-fp8', action='store_true', help='the FP8 prefix MLP option')
    parser.add_argument('--tuned', action='append', default=[],
                        help="tune_kernels.py JSON whose 'best' configurations to apply")
    parser.add_argument('--config', action='append', default=[], metavar='NAME=VALUE',
                        help="a kernel_configs value (as bench's --kernel-config)")
    parser.add_argument('--out', help='JSON report path')
    args = parser.parse_args(argv)
    if not PTXAS.exists():
        parser.error(f'no ptxas at {PTXAS}')
    from tune_kernels import apply, load_best  # benchmarks/, next to this script

    from pi0_ros.tools.bench import apply_kernel_config
    for path in args.tuned:
        apply(load_best(path))
    for setting in args.config:
        apply_kernel_config(setting)
    batches = [int(b) for b in args.batches.split(',')]
    options = {'prefix_fp8': True} if args.prefix_fp8 else {}
    torch.set_num_threads(os.cpu_count() or 1)
    rows = audit(record_launches(batches, args.layers, args.precision, options))
    spilling = [row for row in rows if row['spill_store_bytes'] or row['spill_load_bytes']]
    too_much_shared = [row for row in rows if row['shared_bytes'] > SHARED_LIMIT_BYTES]
    print(f"{'kernel':32} {'batches':18} {'warps':>5} {'regs':>4} {'spill st/ld B':>14} "
          f"{'smem B':>7}  grid")
    for row in rows:
        print(f"{row['kernel']:32} {','.join(map(str, row['batches'])):18} {row['num_warps']:5} "
              f"{row['registers']:4} {row['spill_store_bytes']:>6}/{row['spill_load_bytes']:<7} "
              f"{row['shared_bytes']:7}  {row['grids'][0]}")
    print(f'{len(rows)} compilations, {len(spilling)} with spills, {len(too_much_shared)} '
          f'asking for more than {SHARED_LIMIT_BYTES} B of shared memory')
    if args.out:
        Path(args.out).write_text(json.dumps(
            {'target': 'sm_90a', 'precision': args.precision, 'layers': args.layers,
             'options': options, 'tuned': args.tuned, 'configs': args.config,
             'shared_limit_bytes': SHARED_LIMIT_BYTES, 'ptxas': str(PTXAS.name), 'triton': triton.__version__,
             'compilations': rows}, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
