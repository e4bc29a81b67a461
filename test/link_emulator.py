# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Two hosts on one machine: a robot and a policy network namespace joined by an emulated link.

Each namespace has a veth link to the root namespace, where this module's forwarder (run as
`python link_emulator.py FORWARD ROBOT_END POLICY_END`) copies every Ethernet frame from one veth
to the other after a delay, dropping a share of them: what `tc qdisc ... netem delay 20ms loss
1%` does, which this machine's kernel lacks ("Specified qdisc kind is unknown"). Frames are
delayed and dropped one by one, as netem does, so a UDP datagram of several IP fragments is lost
when any fragment is. The forwarder takes `set DELAY_S LOSS` and `counters` on stdin.

Needs root (network namespaces, raw sockets); `unavailable()` says why not where it cannot run.
"""
import array
import collections
import fcntl
import json
import os
import random
import select
import shutil
import socket
import struct
import subprocess
import sys
import time

ETH_P_ALL = 0x0003
SIOCETHTOOL = 0x8946
ETHTOOL_STXCSUM = 0x00000017
ROBOT_ADDRESS, POLICY_ADDRESS = '10.77.0.1', '10.77.0.2'


def _ip(*args, check=True):
    return subprocess.run(['ip', *args], capture_output=True, text=True, check=check)


def unavailable() -> str:
    """Return why namespaces and raw sockets cannot be used here ('' when they can)."""
    if os.geteuid() != 0:
        return 'needs root (network namespaces and raw sockets)'
    if shutil.which('ip') is None:
        return "no 'ip' command (iproute2)"
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)).close()
    except (AttributeError, OSError) as error:
        return f'no raw packet sockets: {error}'
    probe = f'pi0probe{os.getpid()}'
    created = _ip('netns', 'add', probe, check=False)
    if created.returncode != 0:
        return f'cannot create a network namespace: {created.stderr.strip()}'
    _ip('netns', 'delete', probe, check=False)
    return ''


def disable_tx_checksum_offload(device: str) -> None:
    """
    Make the kernel fill in checksums of frames sent on device (ethtool -K device tx off).

    A veth otherwise leaves them to the receiver, which would drop the frames the forwarder
    re-sends on the other veth.
    """
    request = array.array('I', [ETHTOOL_STXCSUM, 0])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL,
                    struct.pack('16sP', device.encode(), request.buffer_info()[0]))


class EmulatedLink:
    """Namespaces `robot` and `policy` (10.77.0.1 and .2) and the forwarder between them."""

    def __init__(self, delay_s: float, loss: float):
        tag = os.getpid() % 100000
        self.robot_ns, self.policy_ns = f'pi0robot{tag}', f'pi0policy{tag}'
        self._ends = (f'pi0r{tag}', f'pi0p{tag}')  # the root namespace's end of each veth
        self._forwarder = None
        try:
            for namespace, end, address in ((self.robot_ns, self._ends[0], ROBOT_ADDRESS),
                                            (self.policy_ns, self._ends[1], POLICY_ADDRESS)):
                _ip('netns', 'add', namespace)
                _ip('link', 'add', end, 'type', 'veth', 'peer', 'name', 'eth0', 'netns',
                    namespace)
                _ip('link', 'set', end, 'up')
                for command in (('addr', 'add', f'{address}/24', 'dev', 'eth0'),
                                ('link', 'set', 'eth0', 'up'), ('link', 'set', 'lo', 'up'),
                                # DDS discovery: multicast out of eth0 (there is no default route).
                                ('route', 'add', '224.0.0.0/4', 'dev', 'eth0')):
                    _ip('-n', namespace, *command)
                subprocess.run(self.exec_prefix(namespace) + [
                    sys.executable, __file__, 'NOOFFLOAD', 'eth0'], check=True)
            self._forwarder = subprocess.Popen(
                [sys.executable, __file__, 'FORWARD', *self._ends], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True, bufsize=1)
            self.impair(delay_s, loss)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def exec_prefix(namespace: str) -> list:
        """Return the command prefix that runs a program inside namespace."""
        return ['ip', 'netns', 'exec', namespace]

    def _ask(self, line: str) -> str:
        self._forwarder.stdin.write(line + '\n')
        return self._forwarder.stdout.readline().strip()

    def impair(self, delay_s: float, loss: float) -> None:
        """Delay every frame by delay_s (each way) and drop the share `loss` (0..1) of them."""
        assert self._ask(f'set {delay_s} {loss}') == 'ok'

    def counters(self) -> dict:
        """Return the frames received, dropped and sent by the forwarder so far."""
        return json.loads(self._ask('counters'))

    def close(self) -> None:
        """Stop the forwarder and delete the namespaces (with their veth links)."""
        if self._forwarder is not None:
            self._forwarder.kill()
            self._forwarder.wait()
        for namespace in (self.robot_ns, self.policy_ns):
            _ip('netns', 'delete', namespace, check=False)


def forward(robot_end: str, policy_end: str) -> None:
    """Copy frames between two devices after the delay, dropping the set share (stdin: control)."""
    sockets = []
    for device in (robot_end, policy_end):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.bind((device, 0))
        sock.setblocking(False)
        sockets.append(sock)
    other = {sockets[0]: sockets[1], sockets[1]: sockets[0]}
    queues = {sock: collections.deque() for sock in sockets}  # (due, frame) per outgoing device
    delay, loss = 0.0, 0.0
    counts = collections.Counter(received=0, dropped=0, sent=0)
    control = sys.stdin
    while True:
        now = time.monotonic()
        due = min((queue[0][0] for queue in queues.values() if queue), default=now + 0.1)
        readable, _, _ = select.select([control, *sockets], [], [], max(0.0, due - now))
        now = time.monotonic()
        for source in readable:
            if source is control:
                words = control.readline().split()
                if not words:
                    return  # the test closed stdin
                if words[0] == 'set':
                    delay, loss = float(words[1]), float(words[2])
                    print('ok', flush=True)
                else:
                    print(json.dumps(dict(counts)), flush=True)
                continue
            while True:
                try:
                    frame, address = source.recvfrom(65535)
                except BlockingIOError:
                    break
                if address[2] == socket.PACKET_OUTGOING:
                    continue  # a frame this forwarder sent
                counts['received'] += 1
                if random.random() < loss:
                    counts['dropped'] += 1
                else:
                    queues[other[source]].append((now + delay, frame))
        for sink, queue in queues.items():
            while queue and queue[0][0] <= now:
                try:
                    sink.send(queue.popleft()[1])
                    counts['sent'] += 1
                except OSError:
                    counts['dropped'] += 1  # e.g. a frame larger than the device's MTU


if __name__ == '__main__':
    if sys.argv[1] == 'NOOFFLOAD':
        disable_tx_checksum_offload(sys.argv[2])
    elif sys.argv[1] == 'FORWARD':
        forward(sys.argv[2], sys.argv[3])
