# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""A ROS_DOMAIN_ID of its own for each demo, soak or test run on one machine."""
import fcntl
import os
from pathlib import Path
import random
import tempfile

# Linux allows 0..101 with the default port mapping; 0 is everyone's default.
DOMAIN_IDS = range(1, 102)
_LOCK_DIR = Path(tempfile.gettempdir()) / 'pi0_ros_domains'
_held = {}


def claim_domain_id():
    """Return a domain id no other process of this machine has claimed; held until exit."""
    _LOCK_DIR.mkdir(exist_ok=True)
    candidates = list(DOMAIN_IDS)
    random.Random(os.getpid()).shuffle(candidates)
    for domain_id in candidates:
        if domain_id in _held:
            continue
        lock = open(_LOCK_DIR / f'{domain_id}.lock', 'w')
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        _held[domain_id] = lock
        return domain_id
    raise RuntimeError(f'every ROS domain id in {DOMAIN_IDS} is in use on this machine')


def release_domain_id(domain_id):
    """Give a claimed domain id back."""
    lock = _held.pop(domain_id, None)
    if lock is not None:
        lock.close()
