# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Tooling around the package: the demo, the soak, the engine benchmark and their processes."""
