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

Turns are handed on in order: a process queues at a gate (a second lock file) and keeps the gate
while it waits for the turn, so the process that just had the turn queues behind it. Without the
gate a process asking again right after its call often wins the lock before the waiting one
wakes up (on a busy 2-core host, one process took up to 96 turns in a row).
"""
import fcntl
import os
import tempfile
import threading
import time


class GpuTurns:
    """
    An exclusive turn on one GPU among processes: `with turns:` around an engine call.

    Or, to do other work while another process has the turn: request() (True: the turn is
    ours), else poll `granted` (on_granted, if given, is called from a helper thread when
    it becomes True), then release().
    """

    def __init__(self, path, on_granted=None):
        self.path = str(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._gate = os.open(self.path + '.gate', os.O_RDWR | os.O_CREAT, 0o600)
        self._on_granted = on_granted
        self.last_wait_s = 0.0    # how long the last turn waited for other processes'
        self.waited = 0           # turns that found the GPU in another process's turn
        self._granted = threading.Event()
        self._wanted = threading.Event()     # the helper thread's next wait, asked by request()
        self._gate_held = False              # request() took the gate: the helper keeps it
        self._requested_at = 0.0
        self._helper = None
        self._closed = False

    @classmethod
    def for_device(cls, device, directory=None, on_granted=None):
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
        return cls(os.path.join(directory, f'pi0_ros_gpu_turns_{os.getuid()}_{name}.lock'),
                   on_granted=on_granted)

    @property
    def granted(self):
        """Whether the turn asked for by request() is ours."""
        return self._granted.is_set()

    def request(self):
        """
        Ask for the turn: True if it is ours now; else a helper thread waits for it.

        In line behind the process waiting for the turn, if any (the gate).
        """
        self._requested_at = time.monotonic()
        self._granted.clear()
        self._gate_held = _try_lock(self._gate)
        if self._gate_held and _try_lock(self._fd):
            fcntl.flock(self._gate, fcntl.LOCK_UN)
            self._gate_held = False
            self.last_wait_s = 0.0
            self._granted.set()
            return True
        if self._helper is None:
            self._helper = threading.Thread(target=self._wait_for_turns, daemon=True,
                                            name='pi0_gpu_turns')
            self._helper.start()
        self._wanted.set()
        return False

    def wait(self):
        """Block until the turn asked for by request() is ours."""
        self._granted.wait()

    def release(self):
        """Give the turn back."""
        self._granted.clear()
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def __enter__(self):
        if not self.request():
            self.wait()
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def _wait_for_turns(self):
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._closed:
                return
            try:
                if not self._gate_held:
                    fcntl.flock(self._gate, fcntl.LOCK_EX)  # releases the GIL while it waits
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX)
                finally:
                    fcntl.flock(self._gate, fcntl.LOCK_UN)
                    self._gate_held = False
            except OSError:  # closed under it
                return
            self.last_wait_s = time.monotonic() - self._requested_at
            self.waited += 1
            self._granted.set()
            if self._on_granted is not None:
                self._on_granted()

    def close(self):
        """Close the files (a turn held is released); call with no request() waiting."""
        self._closed = True
        self._wanted.set()
        for fd in (self._fd, self._gate):
            if fd >= 0:
                os.close(fd)
        self._fd = self._gate = -1


def _try_lock(fd):
    """Take an exclusive flock if it is free; return whether it was."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
