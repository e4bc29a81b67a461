# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Time attention backends and the patch embedding at Pi0's shapes, in CUDA graphs (GPU only).

Prefix attention (816 tokens x 8 heads folded into 6528 query rows over the 816 keys of one KV
head, head_dim 256, the last 30 keys padding) at batch 1 and 8: the engine's Triton kernel
(committed tile and a few others) against PyTorch's scaled_dot_product_attention restricted to
the cuDNN or the memory-efficient backend with an additive mask. Vision attention (SigLIP: 16
heads of 72 over each image's 256 tokens, strided views of one QKV tensor, as
model.vision_forward passes them) at 1, 3 and 24 images: cuDNN, flash, memory-efficient.
Patch embedding at 1, 3 and 24 images: cuDNN's convolution against model.embed_patches (one
GEMM). Every candidate is checked against a float32 reference.
Usage: python benchmarks/attention_backends.py --json attention_backends.json
"""
import argparse
import json

import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F  # noqa: N812
from tune_kernels import attention_problem, time_graph  # benchmarks/, next to this script

from pi0_ros.engine import attention
from pi0_ros.engine.model import embed_patches

BACKENDS = {'cudnn': SDPBackend.CUDNN_ATTENTION, 'flash': SDPBackend.FLASH_ATTENTION,
            'efficient': SDPBackend.EFFICIENT_ATTENTION}
PREFIX_TILES = [  # block_m, block_n, num_warps, num_stages (no key split)
    (64, 64, 4, 2), (128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2), (64, 128, 4, 2),
    (128, 32, 4, 2)]


def measure(name: str, run, reference: torch.Tensor, calls: list = None) -> dict:
    """Check run() against reference, then time calls (default [run]) in a CUDA graph."""
    try:
        error = (run().float() - reference).abs().max().item()
        micros = time_graph(calls or [run])
    except Exception as failure:  # noqa: B902 - an unsupported backend or shape: record it
        print(f'  {name}: failed ({type(failure).__name__}: {failure})'[:300], flush=True)
        return {'name': name, 'failed': f'{type(failure).__name__}: {failure}'[:500]}
    print(f'  {name}: {micros:8.2f} us, max |error| {error:.3g}', flush=True)
    return {'name': name, 'us': micros, 'max_abs_error': error}


def prefix_attention(batch: int) -> dict:
    q, caches, bias = attention_problem(batch, 816 * 8, 816, 0)
    scale = 256 ** -0.5
    k0, v0 = caches[0]
    reference = torch.softmax(q.float() @ k0.float().transpose(1, 2) * scale
                              + bias[:, None, :], -1) @ v0.float()
    caches = caches[:max(2, 18 // batch)]  # miss the L2 cache, as 18 layers do
    print(f'prefix attention, batch {batch}', flush=True)
    results = []
    for block_m, block_n, warps, stages in PREFIX_TILES:
        config = {'block_m': block_m, 'block_n': block_n, 'keys_per_split': 0,
                  'num_warps': warps, 'num_stages': stages}
        results.append(measure(
            f'triton {config}',
            lambda c=config: attention._launch(q, k0, v0, bias, scale, 0, 0, c), reference,
            [lambda k=k, v=v, c=config: attention._launch(q, k, v, bias, scale, 0, 0, c)
             for k, v in caches]))
    mask = bias[:, None, None, :].to(q.dtype)  # the key padding as an additive mask

    def sdpa(k, v, backend):  # the folded query rows are one head of each sequence
        with sdpa_kernel(BACKENDS[backend]):
            return F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None],
                                                  attn_mask=mask, scale=scale)[:, 0]

    for backend in ('cudnn', 'efficient'):
        results.append(measure(f'sdpa {backend}', lambda b=backend: sdpa(k0, v0, b), reference,
                               [lambda k=k, v=v, b=backend: sdpa(k, v, b) for k, v in caches]))
    return {'batch': batch, 'candidates': results}


def vision_attention(images: int) -> dict:
    heads, head_dim, tokens = 16, 72, 256
    qkv = torch.randn(images, tokens, 3, heads, head_dim, dtype=torch.bfloat16, device='cuda')
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    weights = torch.softmax(q.float() @ k.float().transpose(-1, -2) * head_dim ** -0.5, -1)
    reference = weights @ v.float()
    print(f'vision attention, {images} images', flush=True)
    results = []
    for backend in ('cudnn', 'flash', 'efficient'):
        def run(backend=backend):
            with sdpa_kernel(BACKENDS[backend]):
                return F.scaled_dot_product_attention(q, k, v)
        results.append(measure(f'sdpa {backend}', run, reference))
    return {'images': images, 'candidates': results}


def patch_embedding(images: int) -> dict:
    width, patch, size = 1152, 14, 224
    pixels = torch.rand(images, 3, size, size, device='cuda') * 2 - 1
    kernel = torch.randn(width, 3, patch, patch, device='cuda') * 0.02
    bias = torch.randn(width, device='cuda') * 0.02
    positions = torch.randn((size // patch) ** 2, width, device='cuda')
    reference = (F.conv2d(pixels, kernel, bias, stride=patch).flatten(2).transpose(1, 2)
                 + positions)
    kernel16, bias16 = kernel.bfloat16(), bias.bfloat16()
    flat16 = kernel16.flatten(1).contiguous()

    def convolution():  # the engine's code before session 8
        x = F.conv2d(pixels.bfloat16(), kernel16, bias16, stride=patch)
        return (x.flatten(2).transpose(1, 2).float() + positions).contiguous()

    print(f'patch embedding, {images} images', flush=True)
    return {'images': images, 'candidates': [
        measure('cudnn convolution', convolution, reference),
        measure('patch GEMM (model.embed_patches)',
                lambda: embed_patches(pixels, flat16, bias16, positions, patch), reference)]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--json', default='attention_backends.json')
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    report = {'device': torch.cuda.get_device_name(), 'torch': torch.__version__,
              'cudnn': torch.backends.cudnn.version(),
              'prefix_attention': [prefix_attention(b) for b in (1, 8)],
              'vision_attention': [vision_attention(i) for i in (1, 3, 24)],
              'patch_embedding': [patch_embedding(i) for i in (1, 3, 24)]}
    with open(args.json, 'w', encoding='utf-8') as stream:
        json.dump(report, stream, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
