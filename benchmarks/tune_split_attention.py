# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Time split_attention's launch configurations at the denoising suffix's shape (GPU only).

For each configuration: median time of one call (triton.testing.do_bench) and the max error
against a float32 reference. Prints a table and writes JSON; with --apply-best, sets the best
configuration in pi0_ros.engine.kernels and runs the engine benchmark with the remaining
arguments in this process (so its numbers are for that configuration).
"""
import argparse
import itertools
import json
import sys

import torch
import triton.testing

from pi0_ros.engine import kernels


def suffix_problem(batch=1, prefix=816, seq=51, heads=8, dim=256, dtype=torch.bfloat16):
    """Return (q, k, v, mask, scale) shaped like one action-expert layer's attention."""
    torch.manual_seed(0)
    length = prefix + seq
    q = torch.randn(batch, seq * heads, dim, dtype=dtype, device='cuda')
    k = torch.randn(batch, length, dim, dtype=dtype, device='cuda')
    v = torch.randn(batch, length, dim, dtype=dtype, device='cuda')
    allowed = torch.ones(batch, seq, length, dtype=torch.bool, device='cuda')
    allowed[:, 0, prefix + 1:] = False
    allowed = allowed.repeat_interleave(heads, dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device='cuda').masked_fill_(
        ~allowed, float('-inf'))
    return q, k, v, mask, dim ** -0.5


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--json', default='split_attention.json', help='where the table goes')
    parser.add_argument('--apply-best', action='store_true')
    args, bench_args = parser.parse_known_args(argv)
    q, k, v, mask, scale = suffix_problem()
    reference = torch.softmax(q.float() @ k.float().transpose(1, 2) * scale + mask.float(),
                              -1) @ v.float()
    baseline_ms = triton.testing.do_bench(
        lambda: torch.bmm(torch.softmax(torch.baddbmm(mask, q, k.transpose(1, 2), alpha=scale),
                                        -1), v), return_mode='median')
    rows = []
    for block_m, keys_per_split, num_warps in itertools.product((16, 32, 64), (64, 128, 256),
                                                                (4, 8)):
        kernels.SPLIT_ATTENTION_CONFIG = {'block_m': block_m, 'keys_per_split': keys_per_split,
                                          'num_warps': num_warps}
        try:
            out = kernels.split_attention(q, k, v, mask, scale)
            error = (out.float() - reference).abs().max().item()
            ms = triton.testing.do_bench(lambda: kernels.split_attention(q, k, v, mask, scale),
                                         return_mode='median')
        except Exception as failure:  # noqa: B902 - e.g. out of shared memory: skip it
            print(f'{block_m:3d} {keys_per_split:4d} {num_warps}: failed ({failure})')
            continue
        rows.append({'block_m': block_m, 'keys_per_split': keys_per_split,
                     'num_warps': num_warps, 'median_us': ms * 1e3, 'max_abs_error': error})
        print(f'{block_m:3d} {keys_per_split:4d} {num_warps}: {ms * 1e3:7.2f} us  '
              f'err {error:.2e}')
    valid = [r for r in rows if r['max_abs_error'] < 2e-2]
    best = min(valid, key=lambda r: r['median_us'])
    print(f'baddbmm + softmax + bmm: {baseline_ms * 1e3:.2f} us; best split: {best}')
    with open(args.json, 'w') as stream:
        json.dump({'shape': 'batch 1, 408 query rows (51 tokens x 8 heads), 867 keys, dim 256, '
                            'bf16', 'baseline_us': baseline_ms * 1e3, 'configs': rows,
                   'best': best}, stream, indent=2)
    if args.apply_best:
        kernels.SPLIT_ATTENTION_CONFIG = {key: best[key]
                                          for key in ('block_m', 'keys_per_split', 'num_warps')}
        from pi0_ros import bench
        return bench.main(bench_args)
    return 0


if __name__ == '__main__':
    sys.exit(main())
