# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The benchmark tool on the CPU: its report and the GPU telemetry sampler."""
import dataclasses
import json
import threading
import time

import numpy as np
import pytest
import torch

from pi0_ros.engine import EngineOptions, ModelDims, Pi0Engine
from pi0_ros.engine.config import RTCRequest
from pi0_ros.tools import bench
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


def test_bench_times_rtc_guided_calls_against_plain_ones_per_mode_and_batch(tmp_path):
    assert main(['--dims', 'tiny', '--device', 'cpu', '--batches', '1,2', '--iters', '3',
                 '--warmup-iters', '1', '--cameras', '2', '--frame', '120x160', '--skip-lerobot',
                 '--rtc', 'jacobian,lerobot', '--out', str(tmp_path)]) == 0
    report = json.loads((tmp_path / 'bench.json').read_text())
    assert 'rtc_options' not in report['engine'] and 'rtc_options' not in report['engine_sweep']
    rtc = report['rtc']
    assert rtc['inference_delay'] == 3 and list(rtc['modes']) == ['lerobot', 'jacobian']
    for mode, jacobian in (('lerobot', False), ('jacobian', True)):
        result = rtc['modes'][mode]
        assert result['rtc_options'] == {'schedule': 'linear', 'max_guidance_weight': 10.0,
                                         'execution_horizon': 10, 'jacobian': jacobian}
        for batch in ('1', '2'):
            entry = result['batches'][batch]
            plain, guided = entry['plain'], entry['guided']
            assert 'rtc' not in plain
            for timing in (plain, guided):
                assert len(timing['latencies_ms']) == 3 and timing['gpu'] is None
                assert set(timing['stages_p50_ms']) == {'preprocess', 'vision', 'prefix',
                                                        'denoise'}
                assert {'p50', 'p90', 'p99', 'chunks_per_s'} <= set(timing)
            calls = 1 + 3  # warm-up and timed calls, every one guided and applied
            assert guided['rtc'] == {'inference_delay': 3, 'guided_calls': calls,
                                     'guided_results': calls * int(batch),
                                     'applied_results': calls * int(batch)}
            assert entry['ratio_p50'] == guided['p50'] / plain['p50']
            summary = report['engine']['batches'][batch]['rtc'][mode]
            assert summary['p50'] == guided['p50'] and summary['p99'] == guided['p99']
            assert summary['ratio_to_plain_p50'] == entry['ratio_p50']
            assert summary['plain_p50_same_engine'] == plain['p50']
            assert summary['chunks_per_s'] == guided['chunks_per_s'] > 0
            assert summary['applied_results'] == summary['guided_results'] == calls * int(batch)


def test_bench_fails_loudly_when_a_guided_call_falls_back_to_the_plain_path(monkeypatch):
    args = bench.parse_args(['--dims', 'tiny', '--device', 'cpu', '--iters', '1',
                             '--warmup-iters', '0', '--cameras', '1'])
    engine = Pi0Engine.random(ModelDims.tiny(), state_dim=args.state_dim,
                              action_dim=args.action_dim, num_cameras=1,
                              options=EngineOptions(device='cpu', max_batch=2))
    try:
        bench.time_engine(engine, args, 2, 1, rtc_delay=3)  # usable requests: guided
        monkeypatch.setattr(bench, 'rtc_requests', lambda results, delay: [
            RTCRequest(r.normalized_actions[:, :1], delay) for r in results])  # wrong shape
        with pytest.raises(RuntimeError, match='observation 0: the RTC request was not applied'):
            bench.time_engine(engine, args, 2, 1, rtc_delay=3)
    finally:
        engine.close()


def test_rtc_modes_parse_in_a_fixed_order_and_unknown_ones_stop_the_bench():
    assert bench.parse_rtc_modes('') == []
    assert bench.parse_rtc_modes(' jacobian, lerobot,lerobot') == ['lerobot', 'jacobian']
    with pytest.raises(SystemExit, match='unknown mode.*paper'):
        bench.parse_rtc_modes('lerobot,paper')
    with pytest.raises(SystemExit, match='--rtc-delay must be in 0..49'):
        main(['--dims', 'tiny', '--rtc', 'lerobot', '--rtc-delay', '50', '--out', '/nonexistent'])
