# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Turns on a GPU that several processes' engines share: one engine call at a time.

Two processes whose engine calls run on one GPU at the same time do not finish sooner: the GPU
time-slices between their CUDA contexts, so each call takes about as long as both together, and a
chunk waits for its own call stretched by the other's. Taking turns (an exclusive `flock` on a
file named after the GPU's UUID, held for the call) keeps each call as short as it is alone, and
the observation a call takes is the newest one when its turn begins. A process that dies releases
its turn with its file descriptor. Every process of the same user on the same GPU that asks for
turns takes part (fleet processes, control nodes), whatever its launch.

A call may end its turn before it returns (release(), e.g. once the GPU has run its prefix): the
next process's host work before its first launch then overlaps this call's last kernels.

Turns are handed on in order: a process queues at a gate (a second lock file) and keeps the gate
while it waits for the turn, so the process that just had the turn queues behind it. Without the
gate a process asking again right after its call often wins the lock before the waiting one
wakes up (on a busy 2-core host, one process took up to 96 turns in a row).
"""
import fcntl
import os
import tempfile
import time


class GpuTurns:
    """An exclusive turn on one GPU among processes: `with turns:` around an engine call."""

    def __init__(self, path):
        self.path = str(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._gate = os.open(self.path + '.gate', os.O_RDWR | os.O_CREAT, 0o600)
        self.last_wait_s = 0.0    # how long the last turn waited for other processes'
        self.waited = 0           # turns that found the GPU in another process's turn
        self._held = False

    @classmethod
    def for_device(cls, device, directory=None):
        """Return the turns of a torch CUDA device (None for other devices)."""
        import torch

        device = torch.device(device)
        if device.type != 'cuda':
            return None
        index = device.index if device.index is not None else torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(index)
        # The UUID names the physical GPU, whatever CUDA_VISIBLE_DEVICES made its index.
        name = str(getattr(properties, 'uuid', '') or f'index{index}')
        directory = directory or tempfile.gettempdir()
        return cls(os.path.join(directory, f'pi0_ros_gpu_turns_{os.getuid()}_{name}.lock'))

    def __enter__(self):
        started = time.monotonic()
        waited = _lock(self._gate)  # in line behind the process waiting for the turn, if any
        try:
            waited = _lock(self._fd) or waited
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.last_wait_s = time.monotonic() - started if waited else 0.0
        self.waited += waited
        self._held = True
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def release(self):
        """End the turn now (once; the `with` block's end then releases nothing)."""
        if self._held:
            self._held = False
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self):
        """Close the files (a turn held is released)."""
        for fd in (self._fd, self._gate):
            if fd >= 0:
                os.close(fd)
        self._fd = self._gate = -1


def _lock(fd):
    """Take an exclusive flock; return whether another holder made it wait."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        fcntl.flock(fd, fcntl.LOCK_EX)  # releases the GIL while it waits
        return True
