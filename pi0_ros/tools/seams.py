# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Chunk hand-overs compared: the closed-loop demo once per mode, the seams of each, one report.

    python -m pi0_ros.tools.seams --duration 60 --modes none,blend,rtc [demo options]

Each mode runs `pi0_ros.tools.demo` (the MuJoCo arm and the control node, the same seed and
instruction) into OUTPUT/MODE/, then seams.json and seams.png in OUTPUT compare, at every chunk
switch, the new chunk's disagreement with the executing one over their overlap (position and
velocity, RMS over the overlap of the L2 norm over joints), the planner reference's largest
acceleration after the switch as a multiple of the joint's limit (before the tracker clips it),
and the tracking error (pi0_ros.control.seams).
"""
import argparse
import json
from pathlib import Path
import sys

import numpy as np

from pi0_ros.tools import demo

# The node parameters of each way of handing a chunk over to the next.
MODES = {
    'none': {'chunk_handover': 'blend', 'blend_duration': 0.0},  # takes over at once
    'blend': {'chunk_handover': 'blend'},  # blended in over blend_duration (0.2 s)
    'rtc': {'chunk_handover': 'rtc'},  # Real-Time Chunking: made to continue the plan
    # ... guided over the whole chunk (the default guides the delay and 10 actions), the weight
    # falling linearly, as the paper's exponential, or held at 1 (the overlap kept as planned)
    'rtc_h50': {'chunk_handover': 'rtc', 'rtc_execution_horizon': 50},
    'rtc_exp_h50': {'chunk_handover': 'rtc', 'rtc_execution_horizon': 50, 'rtc_schedule': 'exp'},
    'rtc_ones_h50': {'chunk_handover': 'rtc', 'rtc_execution_horizon': 50, 'rtc_schedule': 'ones'},
}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--modes', default='none,blend,rtc',
                        help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument('--duration', type=float, default=60.0, help='seconds per mode')
    parser.add_argument('--output', default='reports/seams')
    args, demo_args = parser.parse_known_args(argv)
    args.modes = [m.strip() for m in args.modes.split(',') if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    return args, demo_args


def mode_report(summary):
    """Return the figures of one mode's demo summary that the comparison shows."""
    seams = summary['seams']
    return {'seams': seams['count'], 'overlap_steps_mean': seams['overlap_steps_mean'],
            'position_rms': seams['position_rms'], 'velocity_rms': seams['velocity_rms'],
            'reference_acceleration_ratio': seams['reference_acceleration_ratio'],
            'chunk_acceleration_ratio': seams['chunk_acceleration_ratio'],
            'handover_acceleration_ratio': seams['handover_acceleration_ratio'],
            'handover_over_acceleration_limit': seams['handover_over_acceleration_limit'],
            'position_gap_by_action_p50': seams['position_gap_by_action_p50'],
            'over_acceleration_limit': seams['over_acceleration_limit'],
            'tracking_error_rad': summary['tracking_error_rad'],
            'following_fraction': summary['following_fraction'],
            'commands_out_of_limits': summary['commands_out_of_limits'],
            'node_parameters': summary['node_parameters'], 'failures': summary['failures']}


def write_plot(output, summaries):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    keys = (('position_rms', 'position disagreement over the overlap [rad]'),
            ('velocity_rms', 'velocity disagreement over the overlap [rad/s]'),
            ('reference_acceleration', 'reference acceleration / limit'),
            ('chunk_acceleration', "the new chunk's own acceleration / limit"),
            ('handover_acceleration', "the hand-over's acceleration / limit"))
    figure, axes = plt.subplots(1, len(keys) + 1, figsize=(4.5 * (len(keys) + 1), 3.8))
    for axis, (key, label) in zip(axes[1:], keys):
        for mode, summary in summaries.items():
            values = np.sort([s[key] for s in summary['seams']['seams'] if s[key] is not None])
            if values.size:
                axis.step(values, np.arange(1, values.size + 1) / values.size, where='post',
                          label=mode)
        axis.set_xscale('log')
        axis.set_xlabel(label)
        axis.set_ylabel('share of seams')
        axis.grid(alpha=0.3)
    for axis in axes[3:]:
        axis.axvline(1.0, color='k', lw=0.8, ls='--')
    for mode, summary in summaries.items():
        profile = summary['seams']['position_gap_by_action_p50']
        axes[0].plot(np.arange(len(profile)), profile, label=mode)
    axes[0].set_xlabel('new action after the switch')
    axes[0].set_ylabel('disagreement with the plan [rad], p50')
    axes[0].grid(alpha=0.3)
    axes[0].legend()
    axes[1].legend()
    figure.suptitle('At every chunk switch (cumulative distribution)')
    figure.tight_layout()
    figure.savefig(output / 'seams.png', dpi=90)
    plt.close(figure)


def main(argv=None):
    """Run the demo per mode and compare their seams; 0 when every run worked."""
    args, demo_args = parse_args(sys.argv[1:] if argv is None else argv)
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    summaries, codes = {}, {}
    for mode in args.modes:
        parameters = [f'--node-parameter={name}:={value!r}'
                      for name, value in MODES[mode].items()]
        print(f'--- mode {mode}: {MODES[mode] or "defaults"} ---', flush=True)
        codes[mode] = demo.main(demo_args + parameters + [
            '--duration', str(args.duration), '--output', str(output / mode)])
        summaries[mode] = json.loads((output / mode / 'summary.json').read_text())
    report = {'duration_s': args.duration, 'demo_arguments': demo_args,
              'modes': {mode: mode_report(s) for mode, s in summaries.items()}}
    (output / 'seams.json').write_text(json.dumps(report, indent=2))
    write_plot(output, summaries)
    for mode, item in report['modes'].items():
        position = item['position_rms'] or {}
        reference = item['reference_acceleration_ratio'] or {}
        own = item['chunk_acceleration_ratio'] or {}
        added = item['handover_acceleration_ratio'] or {}
        print(f"{mode:>6}: {item['seams']} seams, position disagreement p50 "
              f"{position.get('p50', float('nan')):.4f} rad, reference acceleration p50 "
              f"{reference.get('p50', float('nan')):.2f} of the limit (the chunks' own "
              f"{own.get('p50', float('nan')):.2f}, the hand-over's "
              f"{added.get('p50', float('nan')):.2f}), tracking error mean "
              f"{(item['tracking_error_rad'] or {}).get('mean') or float('nan'):.4f} rad")
    print(f'report: {output}/seams.json, seams.png')
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == '__main__':
    sys.exit(main())
