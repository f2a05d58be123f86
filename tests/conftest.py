"""Core tests. Fixtures come from ``surge.testing``, which the repository's root ``conftest.py`` opts in to."""
