"""The one exception hierarchy of Surge.

Every message says what is wrong, where (file, dotted config path, plugin and event) and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "SurgeError",
    "ConfigError",
    "PluginError",
    "PluginConflictError",
    "PluginOrderError",
    "ProviderError",
    "LoggedValueError",
    "LabError",
    "CheckpointError",
    "CheckpointSaveError",
]


class SurgeError(Exception):
    """Base class of every error Surge raises on purpose."""


class ConfigError(SurgeError, ValueError):
    """A configuration (Trainer arguments, environment defaults, run config) is invalid.

    ``problems`` holds one ``(path, message)`` pair per problem; the message lists them all.
    """

    def __init__(self, problems: list[tuple[str, str]], source: str = "Trainer arguments") -> None:
        self.problems = list(problems)
        self.source = source
        lines = [f"{len(self.problems)} problem(s) in {source}:"]
        lines += [f"  - {path}: {message}" for path, message in self.problems]
        super().__init__("\n".join(lines))


class PluginError(SurgeError):
    """A plugin could not be loaded, declared itself wrongly, or cannot be activated."""


class PluginConflictError(PluginError):
    """Two distributions claim one plugin name, or two providers claim one provider name."""


class PluginOrderError(PluginError):
    """The declared ``before=``/``after=`` constraints form a cycle, or require (``"name!"``) a plugin that is
    not installed."""


class ProviderError(PluginError, ValueError):
    """A provider name (``accelerator=``, ``strategy=``, ``precision=``...) matches no installed plugin."""


class LoggedValueError(SurgeError, ValueError):
    """``self.log``/``self.log_dict`` got a value it cannot record (a tensor of more than one element, a str, a
    nested dict). Raised at the call, before anything is recorded; also a ``ValueError``, as Lightning's is."""


class LabError(SurgeError):
    """The environment does not match the lab profile (the message is the diff and the fixes), or the
    profile cannot be read."""


class CheckpointError(SurgeError):
    """A checkpoint cannot be used: missing, empty, truncated, corrupt (its content hash does not match),
    never committed (no commit marker), or holding pickled code that the caller did not trust. The message
    names the file."""


class CheckpointSaveError(CheckpointError, OSError):
    """Writing a checkpoint failed (a full disk, a denied permission, a connection dropped mid-upload). The
    message names the file and the cause; checkpoints committed before are intact. Also an ``OSError``, as
    the underlying failure was; ``__cause__`` holds it (with its ``errno``)."""
