# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The GPU telemetry asks NVML for the GPU PyTorch uses, by UUID, not by PyTorch's index."""
import sys
import types

import pytest
import torch

from pi0_ros import nvml
from pi0_ros.diagnostics import GpuTelemetry
from pi0_ros.tools.bench import GpuSampler

# Two GPUs in NVML's (PCI) order; CUDA_VISIBLE_DEVICES=1 makes the second one PyTorch's cuda:0.
UUIDS = ['11111111-aaaa-bbbb-cccc-000000000000', '22222222-aaaa-bbbb-cccc-000000000000']
MEMORY_USED = {'GPU-' + UUIDS[0]: 1 << 30, 'GPU-' + UUIDS[1]: 5 << 30}


def fake_pynvml(known=MEMORY_USED):
    module = types.ModuleType('pynvml')
    module.NVML_CLOCK_SM = 1
    module.nvmlClocksEventReasonSwPowerCap = 4
    module.nvmlInit = lambda: None

    def by_uuid(uuid):
        if uuid not in known:
            raise RuntimeError(f'NVML: {uuid} not found')
        return uuid

    def by_index(index):
        raise AssertionError('NVML index asked for: it need not be the GPU PyTorch uses')

    module.nvmlDeviceGetHandleByUUID = by_uuid
    module.nvmlDeviceGetHandleByIndex = by_index
    module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(
        used=known[handle], total=141 << 30)
    module.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=37)
    module.nvmlDeviceGetEnforcedPowerLimit = lambda handle: 700_000 if '2222' in handle else 1
    module.nvmlDeviceGetPowerUsage = lambda handle: 650_000
    module.nvmlDeviceGetClockInfo = lambda handle, clock: 1980
    module.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: 0
    module.nvmlDeviceGetTotalEnergyConsumption = lambda handle: 1000
    return module


@pytest.fixture
def second_gpu_as_cuda0(monkeypatch):
    """Make NVML's second GPU the only one PyTorch sees, as cuda:0."""
    monkeypatch.setitem(sys.modules, 'pynvml', fake_pynvml())
    monkeypatch.setattr(torch.cuda, 'get_device_properties',
                        lambda index: types.SimpleNamespace(uuid=UUIDS[1 + index]))


def test_telemetry_reads_the_gpu_pytorch_uses(second_gpu_as_cuda0):
    telemetry = GpuTelemetry(torch.device('cuda', 0))
    assert telemetry.available
    assert telemetry.read() == (5 << 30, 141 << 30, 37.0)


def test_benchmark_sampler_reads_the_gpu_pytorch_uses(second_gpu_as_cuda0):
    assert GpuSampler(torch.device('cuda')).power_limit_w == 700.0


def test_no_handle_rather_than_another_gpu(monkeypatch, second_gpu_as_cuda0):
    # cuda:1 does not exist in NVML's list here: no telemetry, never the first GPU's numbers.
    assert nvml.device_handle(torch.device('cuda', 1)) is None
    telemetry = GpuTelemetry(torch.device('cuda', 1))
    assert not telemetry.available and telemetry.read() == (0, 0, 0.0)


def test_mig_instance_and_prefixed_uuid(monkeypatch):
    monkeypatch.setitem(sys.modules, 'pynvml', fake_pynvml({'MIG-' + UUIDS[0]: 3 << 30}))
    monkeypatch.setattr(torch.cuda, 'get_device_properties',
                        lambda index: types.SimpleNamespace(uuid='MIG-' + UUIDS[0]))
    assert GpuTelemetry(torch.device('cuda')).read()[0] == 3 << 30


def test_cpu_and_missing_nvml_have_no_telemetry(monkeypatch):
    assert nvml.device_handle(torch.device('cpu')) is None
    assert nvml.device_handle(None) is None
    monkeypatch.setitem(sys.modules, 'pynvml', None)  # import pynvml raises ImportError
    assert nvml.device_handle(torch.device('cuda')) is None


def test_a_mig_instance_reports_its_memory_without_utilization(monkeypatch):
    # NVML gives no utilization for a MIG instance; the memory it gives must not be lost.
    module = fake_pynvml({'MIG-' + UUIDS[0]: 3 << 30})

    def unsupported(handle):
        raise RuntimeError('NVML_ERROR_NOT_SUPPORTED')

    module.nvmlDeviceGetUtilizationRates = unsupported
    monkeypatch.setitem(sys.modules, 'pynvml', module)
    monkeypatch.setattr(torch.cuda, 'get_device_properties',
                        lambda index: types.SimpleNamespace(uuid='MIG-' + UUIDS[0]))
    assert GpuTelemetry(torch.device('cuda')).read() == (3 << 30, 141 << 30, 0.0)
