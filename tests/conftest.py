"""Core tests. Fixtures come from ``surge.testing``, which the repository's root ``conftest.py`` opts in to."""

# A Lightning project of the porting suite, with a pytest suite of its own: tests/test_porting_programs.py runs
# it on copies (as written, and ported to Surge), never collected as part of this repository's tests.
collect_ignore = ["porting/hydra_template"]
