"""Core tests. Fixtures come from ``surge.testing`` (registered as a pytest plugin by the core package)."""
