"""Every test of this repository (tests/ and plugins/*/tests/) uses Surge's test kit: its fixtures come from
``surge.testing``, a pytest plugin that suites opt in to. Only a top-level conftest may name
``pytest_plugins``, and this one is loaded for any test path given to pytest here."""

pytest_plugins = ["surge.testing"]
