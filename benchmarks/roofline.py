# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Per-stage roofline of one Pi0 chunk against measured stage times (bench.json).

FLOPs and bytes are counted from the model's dimensions (matrix products and attention; weights
read once per use, the prefix KV cache read once per expert layer and step). The roofline time
of a stage is max(FLOPs / peak matrix rate, bytes / peak memory bandwidth); the table shows what
the engine achieved against it. Usage:
    python benchmarks/roofline.py benchmarks/records/2026-12-05-engine-h200/bench.json [--batch 1]
        [--tflops 790] [--tbps 4.8] [--expert-bytes 2]
"""
import argparse
import json

from pi0_ros.engine.config import ModelDims


def stage_costs(dims: ModelDims, batch: int = 1, cameras: int = 3, expert_bytes: float = 2.0,
                half_bytes: int = 2, steps_in_prefix: int = 0) -> dict:
    """
    Return {stage: (flops, bytes)} for one call of `batch` observations.

    steps_in_prefix denoising steps are counted in the prefix stage (the engine's
    overlap_first_step runs the first one there).
    """
    d = dims
    images = batch * cameras
    tokens = images * d.tokens_per_image
    w, m = d.vision_width, d.vision_mlp_dim
    vision_params = d.vision_depth * (4 * w * w + 2 * w * m) + w * d.prefix_width
    vision_flops = (2 * tokens * vision_params
                    + d.vision_depth * images * 4 * d.tokens_per_image ** 2 * w
                    + 2 * tokens * 3 * d.patch_size ** 2 * w)
    vision_bytes = half_bytes * vision_params

    length = cameras * d.tokens_per_image + d.tokenizer_max_length
    pw, hd = d.prefix_width, d.head_dim

    def gemma_params(width, mlp, heads):
        return width * (heads + 2) * hd + heads * hd * width + 3 * width * mlp

    prefix_params = ((d.prefix_depth - 1) * gemma_params(pw, d.prefix_mlp_dim, d.prefix_heads)
                     + pw * 2 * hd)  # the last layer only writes K/V
    prefix_flops = (2 * batch * length * prefix_params
                    + (d.prefix_depth - 1) * batch * 4 * length ** 2 * hd * d.prefix_heads)
    prefix_bytes = half_bytes * prefix_params + batch * d.prefix_depth * length * hd * 2 * 2

    suffix = d.chunk_size + 1
    expert_params = d.expert_depth * gemma_params(d.expert_width, d.expert_mlp_dim,
                                                  d.expert_heads)
    keys = length + suffix
    step_flops = (2 * batch * suffix * expert_params
                  + d.expert_depth * batch * 4 * suffix * keys * hd * d.expert_heads)
    step_bytes = expert_bytes * expert_params + batch * d.expert_depth * keys * hd * 2 * half_bytes
    denoise_steps = d.num_steps - steps_in_prefix
    return {'vision': (vision_flops, vision_bytes),
            'prefix': (prefix_flops + steps_in_prefix * step_flops,
                       prefix_bytes + steps_in_prefix * step_bytes),
            'denoise': (denoise_steps * step_flops, denoise_steps * step_bytes)}


def table(report: dict, batch: int, tflops: float, tbps: float, expert_bytes: float) -> str:
    """Markdown table: stage, measured ms, FLOPs, bytes, achieved rates, roofline ms, ratio."""
    stages = report['engine']['batches'][str(batch)]['stages_p50_ms']
    # Reports from before overlap_first_step have no such switch: all steps in the denoiser.
    overlapped = report['config'].get('no_overlap_first_step') is False
    costs = stage_costs(ModelDims.full(), batch, expert_bytes=expert_bytes,
                        steps_in_prefix=1 if overlapped else 0)
    lines = ['| stage | p50 ms | GFLOP | GB | TFLOP/s | TB/s | roofline ms | p50 / roofline |',
             '|---|---|---|---|---|---|---|---|']
    total_ms = total_roof = 0.0
    for stage in ('vision', 'prefix', 'denoise'):
        flops, nbytes = costs[stage]
        measured = stages[stage]
        roof = max(flops / (tflops * 1e12), nbytes / (tbps * 1e12)) * 1e3
        total_ms += measured
        total_roof += roof
        name = 'prefix + denoising step 0' if stage == 'prefix' and overlapped else stage
        lines.append(f'| {name} | {measured:.2f} | {flops / 1e9:.0f} | {nbytes / 1e9:.2f} | '
                     f'{flops / measured / 1e9:.0f} | {nbytes / measured / 1e9:.2f} | '
                     f'{roof:.2f} | {measured / roof:.1f}x |')
    lines.append(f"| preprocess | {stages['preprocess']:.2f} | | | | | | |")
    lines.append(f'| model stages | {total_ms:.2f} | | | | | {total_roof:.2f} | '
                 f'{total_ms / total_roof:.1f}x |')
    return '\n'.join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('bench_json')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--tflops', type=float, default=790.0, help='peak dense bf16 TFLOP/s')
    parser.add_argument('--tbps', type=float, default=4.8, help='peak memory TB/s')
    parser.add_argument('--expert-bytes', type=float, default=2.0,
                        help='bytes per action-expert weight (1 for the retired FP8 expert '
                             'of record fp8-expert-h200-run9)')
    args = parser.parse_args(argv)
    with open(args.bench_json, encoding='utf-8') as stream:
        report = json.load(stream)
    print(table(report, args.batch, args.tflops, args.tbps, args.expert_bytes))


if __name__ == '__main__':
    main()
