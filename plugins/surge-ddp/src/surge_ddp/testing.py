"""Helpers for tests that launch real multi-process jobs on one machine: :func:`surge.testing.launch`,
:func:`surge.testing.launch_workers` and :func:`surge.testing.clean_env`, re-exported here for the tests written
against surge-ddp's earlier home."""

from __future__ import annotations

from surge.testing import LAUNCHER_VARS, clean_env, launch, launch_workers

__all__ = ["LAUNCHER_VARS", "clean_env", "launch", "launch_workers"]
