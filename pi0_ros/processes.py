# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Child processes of the demo, the soak and the tests: started, logged and always stopped."""
import os
import signal
import subprocess


def format_parameter(value):
    """Format a Python value as the YAML literal of a `--ros-args -p name:=value`."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(format_parameter(v) for v in value) + ']'
    return repr(value)


def ros_args(parameters, remaps=()):
    """Return `--ros-args` with `-r from:=to` remaps and `-p name:=value` parameters."""
    args = ['--ros-args']
    for source, target in remaps:
        args += ['-r', f'{source}:={target}']
    for key, value in parameters.items():
        args += ['-p', f'{key}:={format_parameter(value)}']
    return args


class Process:
    """A child process in its own process group, with its output in `<log_dir>/<name>.log`."""

    def __init__(self, name, command, env, log_dir, cwd=None):
        self.name = name
        self.command = command
        self.log_path = log_dir / f'{name}.log'
        self._log = open(self.log_path, 'wb')
        self.popen = subprocess.Popen(command, env=env, cwd=cwd, stdout=self._log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)

    @property
    def returncode(self):
        """Return the exit code, None while it runs."""
        return self.popen.poll()

    def alive(self):
        return self.popen.poll() is None

    def send_signal(self, sig):
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self, timeout):
        """Wait for exit; return the exit code (raises subprocess.TimeoutExpired)."""
        return self.popen.wait(timeout=timeout)

    def output(self):
        """Return everything the process printed so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors='replace')

    def tail(self, lines=20):
        return '\n'.join(self.output().splitlines()[-lines:])

    def stop(self, timeout=20.0):
        """
        Stop with SIGINT, escalating to SIGKILL; return the exit code.

        Whatever the process started in its group is killed too, so nothing outlives it.
        """
        try:
            if self.popen.poll() is None:
                self.popen.send_signal(signal.SIGINT)
                try:
                    self.popen.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                    self.popen.wait(timeout=timeout)
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        finally:
            self._log.close()
        return self.popen.returncode
