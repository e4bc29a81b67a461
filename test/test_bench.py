# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The benchmark tool on the CPU: its report and the GPU telemetry sampler."""
import dataclasses
import json
import threading
import time

import numpy as np
import torch

from pi0_ros.tools.bench import GpuSampler, main


def test_gpu_sampler_reads_on_a_thread_while_inside_and_summarizes():
    readings = [(600.0, 1700, True), (690.0, 1600, True), (300.0, 1980, False)] * 1000
    threads = []

    def read():
        threads.append(threading.get_ident())
        return readings[len(threads) - 1]

    sampler = GpuSampler(torch.device('cuda'), period_s=0.001, read=read)
    assert sampler.summary() is None
    with sampler:
        deadline = time.monotonic() + 10.0
        while len(threads) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
    count = len(threads)
    assert count >= 3 and threading.get_ident() not in threads
    time.sleep(0.01)
    assert len(threads) == count  # nothing read after leaving
    taken = np.array(readings[:count], dtype=np.float64)
    assert sampler.summary() == {'power_w_p50': float(np.median(taken[:, 0])),
                                 'sm_clock_mhz_p50': float(np.median(taken[:, 1])),
                                 'power_capped_fraction': float(taken[:, 2].mean()),
                                 'power_limit_w': None, 'samples': count, 'energy_j': None}


def test_gpu_sampler_reports_the_energy_used_between_entering_and_leaving():
    counter = iter([1_000.0, 7_500.0, 99_000.0])  # millijoules since the driver loaded
    with GpuSampler(torch.device('cuda'), period_s=0.001, read=lambda: (650.0, 1700, True),
                    energy=lambda: next(counter)) as sampler:
        time.sleep(0.005)
    assert sampler.summary()['energy_j'] == 6.5
    failing = GpuSampler(torch.device('cuda'), period_s=0.001, read=lambda: (1.0, 1, False),
                         energy=lambda: 1 / 0)
    with failing:  # a GPU without the counter: the other figures stay
        time.sleep(0.005)
    assert failing.summary()['energy_j'] is None and failing.summary()['samples'] >= 1


def test_gpu_sampler_keeps_its_samples_when_a_read_fails():
    readings = [(500.0, 1980, False)]

    def read():
        if readings:
            return readings.pop()
        raise RuntimeError('NVML lost the GPU')

    with GpuSampler(torch.device('cuda'), period_s=0.001, read=read) as sampler:
        time.sleep(0.05)
    assert sampler.summary()['samples'] == 1


def test_gpu_sampler_reports_nothing_on_the_cpu():
    with GpuSampler(torch.device('cpu')) as sampler:
        pass
    assert sampler.summary() is None


def test_bench_on_the_cpu_writes_latencies_stages_and_no_gpu_telemetry(tmp_path):
    assert main(['--dims', 'tiny', '--device', 'cpu', '--batches', '1,2', '--iters', '3',
                 '--skip-lerobot', '--instruction', 'grasp', '--out', str(tmp_path)]) == 0
    report = json.loads((tmp_path / 'bench.json').read_text())
    assert report['config']['instruction'] == 'grasp'
    for batch in ('1', '2'):
        result = report['engine']['batches'][batch]
        assert len(result['latencies_ms']) == 3 and result['gpu'] is None
        assert set(result['stages_p50_ms']) == {'preprocess', 'vision', 'prefix', 'denoise'}
        assert result['chunks_per_s'] > 0


def test_the_lerobot_comparison_engine_has_the_timed_engines_options():
    from pi0_ros.tools.bench import comparison_options, engine_options, parse_args
    args = parse_args(['--no-overlap-first-step', '--no-pipelined-upload', '--buckets', '1',
                       '--precision', 'fp16', '--fp8-prefix'])
    timed, compared = engine_options(args, 1), comparison_options(args, 'bf16')
    assert compared.precision == 'bf16' and compared.prefix_fp8
    assert dataclasses.replace(compared, precision='fp16') == timed
    assert not comparison_options(args, 'fp32').prefix_fp8     # FP8 never at fp32
