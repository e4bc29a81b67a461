# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Real-time Pi0 vision-language-action control for ROS 2 arms."""
