# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# `make demo` and `make test` do all setup themselves (scripts/setup_env.sh, idempotent).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Demo settings: DURATION seconds; CHECKPOINT = a LeRobot pi0 checkpoint directory (empty = the
# built-in random tiny model); DEVICE = auto | cpu | cuda; OUTPUT = report folder.
DURATION ?= 30
CHECKPOINT ?=
DEVICE ?= auto
OUTPUT ?= reports/demo
# Demonstrations (make collect): EPISODES expert episodes of the touch task into DATASET.
EPISODES ?= 200
DATASET ?= datasets/so101_touch
# Everything this package starts discovers peers on this host only.
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export MUJOCO_GL ?= egl

.PHONY: env demo test lint bench collect clean

env:
	@bash scripts/setup_env.sh

demo: env
	@$(PY) -m pi0_ros.tools.demo --duration $(DURATION) --checkpoint '$(CHECKPOINT)' \
		--device $(DEVICE) --output $(OUTPUT)

test: env
	@$(PY) -m pytest -ra --timeout=900 --durations=30

lint: env
	@$(PY) -m pytest -ra -m linter

collect: env
	@$(PY) -m pi0_ros.tools.collect --episodes $(EPISODES) --output $(DATASET)

bench: env
	@$(PY) -m pi0_ros.tools.bench --dims tiny --device cpu --out reports/bench

clean:
	rm -rf build reports pi0_ros/msg pi0_ros/srv pi0_ros/*.so pi0_ros/_pi0_ros_s.ep.*
