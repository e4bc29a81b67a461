# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Time the Triton kernels' launch configurations at Pi0's shapes, inside CUDA graphs (GPU only).

Skinny GEMM: each projection of the action expert (qkv, o, gate_up + GELU, down) at 51, 102,
204 and 408 rows (batch 1, 2, 4, 8), against cuBLAS (F.linear; for gate_up F.linear + the GELU
kernel). Attention: the denoising suffix (408 rows, 867 keys) at batch 1, 2, 4, 8 and 16, and
the prefix (6528 rows, 816 keys) at batch 1 and 8. GELU * up GEMM (many rows, TMA tiles):
the prefix MLP's gate/up at batch 1-16 against cuBLAS + the GELU * up kernel. Only with
--only qkv_rope: the expert's qkv projection and RoPE in one kernel (gemm.qkv_rope) at 51 and 102
rows against the skinny GEMM + rope_qkv it would replace (its best tile at 51 rows, where faster,
goes to the JSON's best as QKV_ROPE_CONFIG: engine_ab.py --tuned takes it). Every candidate
is checked against a float32 reference, then timed as a CUDA graph of repeated calls over as
many weight copies as it takes to miss the L2 cache (as the 18 layers do). Writes JSON (all
timings and the best configurations, in kernel_configs' format); with --apply-best, sets them
in pi0_ros.engine.kernel_configs and runs the engine benchmark (pi0_ros.tools.bench) with the
remaining arguments in this process.
"""
import argparse
import itertools
import json
import sys
import time

import torch
import torch.nn.functional as F  # noqa: N812

from pi0_ros.engine import attention, gemm, kernel_configs, kernels

EXPERT = {'qkv': (2560, 1024, False), 'o': (1024, 2048, False),
          'gate_up': (4096, 1024, True), 'down': (1024, 4096, False)}
ROWS = (51, 102, 204, 408)
# The GELU * up GEMM: the prefix MLP (816 rows per observation, batch 1-16), the expert's
# gate/up at batch 8 and 16 (408, 816 rows).
GELU_MUL_GEMM_SHAPES = {(16384, 2048): (816, 1632, 3264, 6528, 13056),
                        (4096, 1024): (408, 816)}
ATTENTION_BATCHES = {'suffix': (1, 2, 4, 8, 16), 'prefix': (1, 8)}
L2_BYTES = 120 << 20


def time_graph(calls: list, repeats: int = 20, trials: int = 5) -> float:
    """Median microseconds of one call, from a CUDA graph of repeats x all calls."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            for call in calls:
                call()
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(trials):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3 / (repeats * len(calls)))
    del graph
    return sorted(samples)[len(samples) // 2]


def gemm_candidates(rows: int, gelu_mul: bool):
    """Coarse grid of skinny-GEMM configurations for one row count."""
    block_ms = (64,) if rows <= 64 else (64, 128)
    for block_m, block_n, block_k, split_k, stages in itertools.product(
            block_ms, (32, 64, 128), (64, 128, 256), (1, 2, 4, 8), (3, 4)):
        if gelu_mul and split_k > 1:
            continue
        tile_bytes = (block_m + block_n * (2 if gelu_mul else 1)) * block_k * 2 * stages
        if tile_bytes > 200 * 1024:
            continue
        yield gemm.SkinnyConfig(block_m, block_n, block_k, split_k,
                                8 if block_n * block_m >= 128 * 64 else 4, stages)


def tune_gemm(name: str, rows: int, dtype=torch.bfloat16) -> dict:
    n_out, depth, gelu_mul = EXPERT[name]
    n_weight = 2 * n_out if gelu_mul else n_out
    copies = max(2, -(-L2_BYTES // (n_weight * depth * 2)))
    weights = [torch.randn(n_weight, depth, dtype=dtype, device='cuda') * 0.03
               for _ in range(copies)]
    x = torch.randn(rows, depth, dtype=dtype, device='cuda')
    product = x.float() @ weights[0].float().T
    reference = (F.gelu(product[:, :n_out], approximate='tanh') * product[:, n_out:]
                 if gelu_mul else product)

    hidden = torch.empty(rows, n_out, dtype=dtype, device='cuda')

    def cublas(weight):
        if gelu_mul:
            return lambda: kernels.gelu_mul(F.linear(x, weight), hidden)
        return lambda: F.linear(x, weight)

    result = {'name': name, 'rows': rows, 'n_out': n_out, 'k': depth, 'gelu_mul': gelu_mul,
              'cublas_us': time_graph([cublas(w) for w in weights]), 'configs': []}
    candidates = [config for config in gemm_candidates(rows, gelu_mul)
                  if gemm.supports(rows, weights[0], config, gelu_mul)]
    best = time_candidates(result, candidates, weights, reference,
                           lambda w, config: gemm.skinny_linear(x, w, gelu_mul=gelu_mul,
                                                                config=config))
    print(f'{name:8s} rows {rows:3d}: cuBLAS {result["cublas_us"]:6.2f} us, best Triton '
          f'{best["us"] if best else float("nan"):6.2f} us {best["config"] if best else ""}',
          flush=True)
    return result


def time_candidates(result: dict, candidates, weights: list, reference: torch.Tensor, launch,
                    repeats: int = 20):
    """
    Check each configuration against the float32 reference, then time it over the weights.

    launch(weight, config) runs one; its timings go to result['configs'] and the fastest
    accurate one to result['best'] (returned; None if none was accurate).
    """
    scale = reference.abs().max().item()
    for config in candidates:
        try:
            out = kernels.sum_parts(launch(weights[0], config)).float()
            error = (out - reference).abs().max().item() / scale
            del out
            micros = time_graph([lambda w=w: launch(w, config) for w in weights],
                                repeats=repeats)
        except Exception as failure:  # noqa: B902 - e.g. out of shared memory: skip it
            print(f'  {result["name"]} {result["rows"]} {config}: failed '
                  f'({type(failure).__name__})')
            continue
        result['configs'].append({'config': vars(config), 'us': micros, 'rel_error': error})
    valid = [c for c in result['configs'] if c['rel_error'] < 2e-2]
    result['best'] = min(valid, key=lambda c: c['us']) if valid else None
    return result['best']


def tune_qkv_rope(rows: int, dtype=torch.bfloat16, heads: int = 8, head_dim: int = 256) -> dict:
    """Time the fused qkv + RoPE kernel's tiles against the skinny GEMM + rope_qkv."""
    n_out, depth, _ = EXPERT['qkv']
    copies = max(2, -(-L2_BYTES // (n_out * depth * 2)))
    weights = [torch.randn(n_out, depth, dtype=dtype, device='cuda') * 0.03
               for _ in range(copies)]
    x = torch.randn(rows, depth, dtype=dtype, device='cuda')
    angle = torch.rand(rows, head_dim // 2, device='cuda') * 6
    cos, sin = angle.cos(), angle.sin()
    q = torch.empty(rows, heads * head_dim, dtype=dtype, device='cuda')
    cache = torch.empty(2, rows // 51, 51, head_dim, dtype=dtype, device='cuda')

    def written():
        return torch.cat([q.float(), cache.float().flatten(1, 2).permute(1, 0, 2)
                          .flatten(1)], dim=1)

    def unfused(weight):
        return lambda: kernels.rope_qkv(gemm.linear(x, weight), cos, sin, q, cache[0],
                                        cache[1], heads, head_dim)
    result = {'name': 'qkv_rope', 'rows': rows,
              'unfused_us': time_graph([unfused(w) for w in weights]), 'configs': []}
    unfused(weights[0])()
    expected = written()
    scale = expected.abs().max().item()
    kernel_configs.QKV_ROPE_MAX_ROWS = max(rows, kernel_configs.QKV_ROPE_MAX_ROWS)
    for block_n, block_k, stages, warps in itertools.product((16, 32, 64), (64, 128, 256),
                                                              (3, 4), (4, 8)):
        config = gemm.SkinnyConfig(64, block_n, block_k, 1, warps, stages)
        try:
            q.zero_()
            cache.zero_()
            assert gemm.qkv_rope(x, weights[0], cos, sin, q, cache[0], cache[1], heads,
                                 head_dim, config=config)
            error = (written() - expected).abs().max().item() / scale
            micros = time_graph([lambda w=w: gemm.qkv_rope(x, w, cos, sin, q, cache[0],
                                                           cache[1], heads, head_dim,
                                                           config=config)
                                 for w in weights])
        except Exception as failure:  # noqa: B902 - e.g. out of shared memory: skip it
            print(f'  qkv_rope {rows} {config}: failed ({type(failure).__name__})')
            continue
        result['configs'].append({'config': vars(config), 'us': micros, 'rel_error': error})
    valid = [c for c in result['configs'] if c['rel_error'] < 2e-2]
    result['best'] = min(valid, key=lambda c: c['us']) if valid else None
    best = result['best']
    print(f'qkv_rope rows {rows:3d}: skinny GEMM + rope_qkv {result["unfused_us"]:6.2f} us, '
          f'best fused {best["us"] if best else float("nan"):6.2f} us '
          f'{best["config"] if best else ""}', flush=True)
    return result


def gelu_mul_gemm_candidates():
    """Tiles of the GELU * up GEMM whose pipeline stages fit in shared memory."""
    for block_m, block_n, block_k, warps, stages in itertools.product(
            (64, 128), (64, 128), (64, 128), (4, 8), (3, 4)):
        if (block_m + 2 * block_n) * block_k * 2 * stages > 200 * 1024:
            continue
        if block_m * block_n >= 128 * 128 and warps == 4:
            continue  # two 128 x 128 float32 accumulators need 8 warps' registers
        yield gemm.SkinnyConfig(block_m, block_n, block_k, 1, warps, stages)


def tune_gelu_mul_gemm(n_out: int, depth: int, rows: int, dtype=torch.bfloat16) -> dict:
    """Time the GELU * up GEMM's candidates against cuBLAS + the GELU * up kernel."""
    copies = max(2, -(-L2_BYTES // (2 * n_out * depth * 2)))
    weights = [torch.randn(2 * n_out, depth, dtype=dtype, device='cuda') * 0.03
               for _ in range(copies)]
    x = torch.randn(rows, depth, dtype=dtype, device='cuda')
    product = x.float() @ weights[0].float().T
    reference = F.gelu(product[:, :n_out], approximate='tanh') * product[:, n_out:]
    del product
    result = {'name': 'gelu_mul_gemm', 'n_out': n_out, 'k': depth, 'rows': rows,
              'cublas_us': time_graph([lambda w=w: gemm._gelu_mul(F.linear(x, w))
                                       for w in weights], repeats=5), 'configs': []}
    best = time_candidates(result, gelu_mul_gemm_candidates(), weights, reference,
                           lambda w, config: gemm.gelu_mul_gemm(x, w, config), repeats=5)
    print(f'gelu_mul_gemm {n_out}x{depth} rows {rows:5d}: cuBLAS + GELU*up '
          f'{result["cublas_us"]:8.2f} us, best {best["us"] if best else float("nan"):8.2f} us '
          f'{best["config"] if best else ""}', flush=True)
    return result


def attention_problem(batch, rows, prefix, suffix, dim=256, layers=18, dtype=torch.bfloat16):
    length = prefix + suffix
    q = torch.randn(batch, rows, dim, dtype=dtype, device='cuda')
    caches = [(torch.randn(batch, length, dim, dtype=dtype, device='cuda'),
               torch.randn(batch, length, dim, dtype=dtype, device='cuda'))
              for _ in range(layers)]
    key_mask = torch.ones(batch, prefix, dtype=torch.bool, device='cuda')
    key_mask[:, prefix - 30:] = False  # a short instruction: padding at the end
    return q, caches, attention.key_bias(key_mask, extra_keys=suffix)


def tune_attention(kind: str, batch: int) -> dict:
    if kind == 'suffix':
        heads, prefix, suffix = 8, 816, 51
        rows, state_rows, state_keys = suffix * heads, heads, prefix + 1
        grid = (itertools.product((16, 32, 64), (32, 64), (64, 128, 256, 512), (4, 8), (2, 3),
                                  (1, 4))
                if batch == 1 else
                itertools.product((32, 64, 128), (32, 64), (128, 256, 512, 0), (4, 8), (2, 3),
                                  (1, 4)))
    else:
        heads, prefix, suffix = 8, 816, 0
        rows, state_rows, state_keys = prefix * heads, 0, 0
        # 32-row blocks: 204 programs at batch 1 (64-row blocks leave SMs idle: 102 of 132).
        grid = itertools.product((32, 64, 128), (32, 64), (0, 256), (4, 8), (2, 3), (1,))
    q, caches, bias = attention_problem(batch, rows, prefix, suffix)
    scale = 256 ** -0.5
    k0, v0 = caches[0]
    mask = attention.dense_mask(bias, rows, state_rows, state_keys, torch.float32)
    reference = torch.softmax(q.float() @ k0.float().transpose(1, 2) * scale + mask,
                              -1) @ v0.float()
    # Enough layers' caches to miss the L2 cache as the 18 layers do, fewer at large batches.
    caches = caches[:max(2, 18 // batch)]
    baseline = time_graph([lambda k=k, v=v: torch.bmm(torch.softmax(torch.baddbmm(
        attention.dense_mask(bias, rows, state_rows, state_keys, q.dtype), q,
        k.transpose(1, 2), alpha=scale), -1), v) for k, v in caches[:4]])
    result = {'kind': kind, 'batch': batch, 'rows': rows, 'keys': prefix + suffix,
              'torch_us': baseline,
              'configs': []}
    for block_m, block_n, keys_per_split, warps, stages, merge_rows in grid:
        if merge_rows > 1 and keys_per_split == 0:
            continue  # no split, nothing to merge
        config = {'block_m': block_m, 'block_n': block_n, 'keys_per_split': keys_per_split,
                  'num_warps': warps, 'num_stages': stages, 'merge_rows': merge_rows}
        try:
            out = attention._launch(q, k0, v0, bias, scale, state_rows, state_keys, config)
            error = (out.float() - reference).abs().max().item()
            micros = time_graph([lambda k=k, v=v: attention._launch(
                q, k, v, bias, scale, state_rows, state_keys, config) for k, v in caches])
        except Exception as failure:  # noqa: B902 - e.g. out of shared memory: skip it
            print(f'  attention {kind} {config}: failed ({type(failure).__name__})')
            continue
        result['configs'].append({'config': config, 'us': micros, 'max_abs_error': error})
    valid = [c for c in result['configs'] if c['max_abs_error'] < 2e-2]
    result['best'] = min(valid, key=lambda c: c['us']) if valid else None
    print(f'attention {kind} batch {batch}: torch {baseline:.2f} us, best {result["best"]}',
          flush=True)
    return result


def best_configs(gemm_results: list, attention_results: list,
                 gelu_mul_results: list = (), qkv_rope_results: list = ()) -> dict:
    """
    Return kernel_configs values: per shape, rows -> config (None = cuBLAS is faster).

    QKV_ROPE_CONFIG: the fused qkv + RoPE kernel's best tile at batch 1's 51 rows, where it beat
    the skinny GEMM + rope_qkv (else None: the committed tile stays).
    """
    wide = {}
    for result in sorted(gelu_mul_results, key=lambda r: r['rows']):
        best = result['best']
        choice = best['config'] if best and best['us'] < result['cublas_us'] else None
        wide.setdefault((result['n_out'], result['k']), []).append((result['rows'], choice))
    skinny = {}
    for result in sorted(gemm_results, key=lambda r: r['rows']):
        key = (result['n_out'], result['k'], result['gelu_mul'])
        best = result['best']
        choice = best['config'] if best and best['us'] < result['cublas_us'] else None
        skinny.setdefault(key, []).append((result['rows'], choice))
    attention_configs = {}
    for result in sorted(attention_results, key=lambda r: r['batch']):
        if result['best'] is not None:
            attention_configs.setdefault(result['kind'], []).append(
                (result['batch'], result['best']['config']))
    qkv_rope = None
    for result in qkv_rope_results:
        best = result['best']
        if result['rows'] == 51 and best and best['us'] < result['unfused_us']:
            qkv_rope = best['config']
    return {'SKINNY_LINEAR': skinny, 'ATTENTION': attention_configs, 'GELU_MUL_GEMM': wide,
            'QKV_ROPE_CONFIG': qkv_rope}


def apply(configs: dict) -> None:
    """
    Set measured configurations in kernel_configs (for this process).

    Row counts and batches that were measured replace the committed entries; the others stay.
    """
    for key, table in configs['SKINNY_LINEAR'].items():
        merged = dict(kernel_configs.SKINNY_LINEAR.get(key, ()))
        merged.update(dict(table))
        kernel_configs.SKINNY_LINEAR[key] = sorted(merged.items())
    if configs.get('GELU_MUL_GEMM'):
        kernel_configs.GELU_MUL_GEMM = configs['GELU_MUL_GEMM']
    for kind, table in configs['ATTENTION'].items():  # measured batches replace committed ones
        merged = dict(kernel_configs.ATTENTION[kind])
        merged.update(dict(table))
        kernel_configs.ATTENTION[kind] = sorted(merged.items())
    if configs.get('QKV_ROPE_CONFIG'):
        kernel_configs.QKV_ROPE_CONFIG = dict(configs['QKV_ROPE_CONFIG'])


def json_best(configs: dict) -> dict:
    """Return best_configs' result as the JSON file's 'best' (read back by load_best)."""
    return {'SKINNY_LINEAR': [[list(key), value] for key, value in
                              configs['SKINNY_LINEAR'].items()],
            'GELU_MUL_GEMM': [[list(key), value] for key, value in
                              configs['GELU_MUL_GEMM'].items()],
            'ATTENTION': configs['ATTENTION'], 'QKV_ROPE_CONFIG': configs['QKV_ROPE_CONFIG']}


def load_best(path: str) -> dict:
    """Read the best configurations back from a JSON file this script wrote (for apply)."""
    with open(path, encoding='utf-8') as stream:
        best = json.load(stream)['best']
    return {'SKINNY_LINEAR': {tuple(key): [tuple(entry) for entry in table]
                              for key, table in best['SKINNY_LINEAR']},
            'GELU_MUL_GEMM': {tuple(key): [tuple(entry) for entry in table]
                              for key, table in best.get('GELU_MUL_GEMM', [])},
            'ATTENTION': {kind: [tuple(entry) for entry in table]
                          for kind, table in best['ATTENTION'].items()},
            'QKV_ROPE_CONFIG': best.get('QKV_ROPE_CONFIG')}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--json', default='kernel_tuning.json', help='where the table goes')
    parser.add_argument('--apply-best', action='store_true')
    parser.add_argument('--only', choices=('gemm', 'gelu_mul_gemm', 'attention', 'qkv_rope'),
                        default=None,
                        help='tune one family (the others keep their committed configurations)')
    parser.add_argument('--suffix-batches', default=None,
                        help="comma-separated batches of the suffix attention to tune ('': "
                             'none)')
    parser.add_argument('--rows', default=None,
                        help='comma-separated row counts of the skinny GEMM to tune '
                             f'(default {",".join(map(str, ROWS))})')
    args, bench_args = parser.parse_known_args(argv)
    started = time.time()
    suffix_batches = (tuple(int(b) for b in args.suffix_batches.split(',') if b.strip())
                      if args.suffix_batches is not None else ATTENTION_BATCHES['suffix'])
    attention_batches = dict(ATTENTION_BATCHES, suffix=suffix_batches)

    def wanted(family):
        return args.only in (None, family)

    rows_to_tune = tuple(int(r) for r in args.rows.split(',')) if args.rows else ROWS
    gemm_results = ([tune_gemm(name, rows) for name in EXPERT for rows in rows_to_tune]
                    if wanted('gemm') else [])
    gelu_mul_results = ([tune_gelu_mul_gemm(n_out, depth, rows)
                         for (n_out, depth), row_counts in GELU_MUL_GEMM_SHAPES.items()
                         for rows in row_counts] if wanted('gelu_mul_gemm') else [])
    attention_results = ([tune_attention(kind, batch) for kind, batches in
                          attention_batches.items() for batch in batches]
                         if wanted('attention') else [])
    qkv_rope_results = ([tune_qkv_rope(rows) for rows in (51, 102)]
                        if args.only == 'qkv_rope' else [])
    configs = best_configs(gemm_results, attention_results, gelu_mul_results, qkv_rope_results)
    print('best configurations:', configs)
    with open(args.json, 'w') as stream:
        json.dump({'device': torch.cuda.get_device_name(), 'seconds': time.time() - started,
                   'gemm': gemm_results, 'attention': attention_results,
                   'gelu_mul_gemm': gelu_mul_results, 'qkv_rope': qkv_rope_results,
                   'best': json_best(configs)}, stream, indent=1)
    if args.apply_best:
        apply(configs)
        from pi0_ros.tools import bench
        return bench.main(bench_args)
    return 0


if __name__ == '__main__':
    sys.exit(main())
