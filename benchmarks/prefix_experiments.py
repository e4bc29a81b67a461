# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Measurements for the next prefix optimizations (GPU only; writes JSON, changes nothing).

1. Prefix attention (8 query heads over one KV head, 816 keys, padding mask): this engine's
   Triton kernel against PyTorch's scaled_dot_product_attention with a broadcast boolean key
   mask (the backend PyTorch picks), at batch 1 and 8.
2. The prefix projections (816 x batch rows) in bf16 cuBLAS against FP8 e4m3 with row-wise
   scales (torch._scaled_mm), at batch 1 and 8, with the relative error of the FP8 result.
Each is timed inside a CUDA graph of repeated calls (benchmarks/tune_kernels.time_graph).
Usage: python benchmarks/prefix_experiments.py --json prefix_experiments.json
"""
import argparse
import json

import torch
import torch.nn.functional as F  # noqa: N812
from tune_kernels import time_graph  # benchmarks/, next to this script

from pi0_ros.engine import attention, kernel_configs

PREFIX = {'qkv': (2560, 2048), 'o': (2048, 2048), 'gate_up': (32768, 2048),
          'down': (2048, 16384)}
LENGTH, HEADS, HEAD_DIM = 816, 8, 256


def attention_case(batch: int) -> dict:
    q = torch.randn(batch, LENGTH * HEADS, HEAD_DIM, dtype=torch.bfloat16, device='cuda')
    k = torch.randn(batch, LENGTH, HEAD_DIM, dtype=torch.bfloat16, device='cuda')
    v = torch.randn_like(k)
    key_mask = torch.ones(batch, LENGTH, dtype=torch.bool, device='cuda')
    key_mask[:, LENGTH - 30:] = False
    bias = attention.key_bias(key_mask)
    config = kernel_configs.attention_config('prefix', batch)
    ours = attention._launch(q, k, v, bias, HEAD_DIM ** -0.5, 0, 0, config)
    # SDPA layout: [b, heads, tokens, dim] queries (row = token * heads + head), one KV head.
    q4 = q.view(batch, LENGTH, HEADS, HEAD_DIM).transpose(1, 2)
    k4, v4 = k[:, None].expand(-1, HEADS, -1, -1), v[:, None].expand(-1, HEADS, -1, -1)
    mask = key_mask[:, None, None, :]

    def sdpa():
        return F.scaled_dot_product_attention(q4, k4, v4, attn_mask=mask)

    reference = sdpa().transpose(1, 2).reshape(batch, LENGTH * HEADS, HEAD_DIM)
    return {'batch': batch, 'ours_us': time_graph([lambda: attention._launch(
                q, k, v, bias, HEAD_DIM ** -0.5, 0, 0, config)]),
            'sdpa_us': time_graph([sdpa]),
            'max_abs_difference': (ours.float() - reference.float()).abs().max().item()}


def fp8_case(name: str, batch: int) -> dict:
    n_out, depth = PREFIX[name]
    rows = batch * LENGTH
    x = torch.randn(rows, depth, dtype=torch.bfloat16, device='cuda')
    weight = torch.randn(n_out, depth, dtype=torch.bfloat16, device='cuda') * 0.02
    fp8_max = torch.finfo(torch.float8_e4m3fn).max
    w_scale = weight.float().abs().amax(1, keepdim=True) / fp8_max
    w8 = (weight.float() / w_scale).to(torch.float8_e4m3fn)

    def quantize_rows():
        scale = x.float().abs().amax(1, keepdim=True) / fp8_max
        return (x.float() / scale).to(torch.float8_e4m3fn), scale

    x8, x_scale = quantize_rows()

    def fp8_mm():
        return torch._scaled_mm(x8, w8.t(), scale_a=x_scale, scale_b=w_scale.t(),
                                out_dtype=torch.bfloat16)

    exact = x.float() @ weight.float().t()
    error = ((fp8_mm().float() - exact).norm() / exact.norm()).item()
    bf16_error = ((F.linear(x, weight).float() - exact).norm() / exact.norm()).item()
    flops = 2 * rows * n_out * depth
    bf16_us = time_graph([lambda: F.linear(x, weight)])
    fp8_us = time_graph([fp8_mm])
    quant_us = time_graph([quantize_rows])
    return {'name': name, 'batch': batch, 'rows': rows, 'bf16_us': bf16_us, 'fp8_us': fp8_us,
            'torch_row_quantize_us': quant_us, 'bf16_tflops': flops / bf16_us / 1e6,
            'fp8_tflops': flops / fp8_us / 1e6, 'fp8_relative_error': error,
            'bf16_relative_error': bf16_error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--json', default='prefix_experiments.json')
    args = parser.parse_args()
    results = {'device': torch.cuda.get_device_name(), 'attention': [], 'fp8': []}
    for batch in (1, 8):
        try:
            results['attention'].append(attention_case(batch))
        except Exception as failure:  # noqa: B902 - record what failed and go on
            results['attention'].append({'batch': batch, 'error': repr(failure)})
        print(results['attention'][-1], flush=True)
        for name in PREFIX:
            try:
                results['fp8'].append(fp8_case(name, batch))
            except Exception as failure:  # noqa: B902
                results['fp8'].append({'name': name, 'batch': batch, 'error': repr(failure)})
            print(results['fp8'][-1], flush=True)
    with open(args.json, 'w', encoding='utf-8') as stream:
        json.dump(results, stream, indent=1)


if __name__ == '__main__':
    main()
