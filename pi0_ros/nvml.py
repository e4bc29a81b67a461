# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The NVML (pynvml) handle of the GPU behind a PyTorch device, for telemetry."""
import torch


def device_handle(device: torch.device):
    """
    Return (pynvml, handle) of a CUDA device, or None (no GPU, no NVML, no match).

    The GPU is found by its UUID: NVML numbers all of a machine's GPUs in PCI order, while
    PyTorch's indices count only those CUDA_VISIBLE_DEVICES names, in CUDA_DEVICE_ORDER, so
    the same index can be another GPU. A device NVML does not know by UUID gets no handle
    rather than another GPU's.
    """
    if device is None or device.type != 'cuda':
        return None
    try:
        import pynvml
        uuid = str(torch.cuda.get_device_properties(device.index or 0).uuid)
        uuid = uuid.removeprefix('GPU-').removeprefix('MIG-')
        pynvml.nvmlInit()
    except Exception:  # noqa: B902 - no driver, no NVML or no such device: no telemetry
        return None
    for prefix in ('GPU-', 'MIG-'):  # a whole GPU, or a MIG instance
        try:
            return pynvml, pynvml.nvmlDeviceGetHandleByUUID(prefix + uuid)
        except Exception:  # noqa: B902 - not known under this prefix
            continue
    return None
