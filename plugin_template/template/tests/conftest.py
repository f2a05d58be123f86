"""Surge's test kit: the fixtures of ``surge.testing`` (``tiny_fit``, ``plugin_env``, ``make_trainer``, ...)
for these tests. A pytest plugin that test suites opt in to, here or with ``pytest -p surge.testing``."""

pytest_plugins = ["surge.testing"]
