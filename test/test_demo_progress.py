# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The demo's progress lines: overwritten on a terminal, throttled lines in a log."""
import io

from pi0_ros.tools.demo import ProgressPrinter


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_file_gets_one_line_per_interval():
    log = io.StringIO()
    progress = ProgressPrinter(log)
    for step in range(1000):  # 10 s of status updates every 10 ms
        progress.show(f'status {step}', now=step * 0.01)
    progress.finish()
    lines = log.getvalue().splitlines()
    assert lines == ['status 0', 'status 500']
    assert '\r' not in log.getvalue()


def test_a_terminal_line_is_overwritten_and_ended_once():
    terminal = FakeTerminal()
    progress = ProgressPrinter(terminal)
    for step in range(100):  # 1 s every 10 ms: shown at 0 and 0.5 s
        progress.show(f'status {step}', now=step * 0.01)
    progress.finish()
    assert terminal.getvalue() == '\rstatus 0\rstatus 50\n'


def test_after_finish_the_next_line_shows_at_once():
    log = io.StringIO()
    progress = ProgressPrinter(log)
    progress.show('waiting', now=0.0)
    progress.finish()
    progress.show('running', now=0.1)
    assert log.getvalue().splitlines() == ['waiting', 'running']
