# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""MuJoCo simulator of an SO-101 arm on a table (test and demo infrastructure)."""
