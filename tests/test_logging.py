"""Logging goes through loguru. The ``surge`` command configures it: quiet by default, SURGE_LOG_LEVEL to
change it, stdlib records of torch and plugins routed in. A Trainer used as a library leaves the host's
logging as it was."""

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import _distributions as dists  # tests/ is on sys.path (pytest `pythonpath`)
import pytest
from loguru import logger
from surge import configure_logging
from surge._logging import route_stdlib

# A model for `surge fit` that asks for a stop (an INFO record) and warns through the stdlib loggers of torch
# and of a default plugin (surge-csv's package).
MODEL = """
import logging
from surge.testing import TinyModule

class StopsAndWarns(TinyModule):
    def training_step(self, batch, batch_idx):
        if batch_idx == 1:
            self.trainer.request_stop("checking the log level")
            logging.getLogger("torch.surge_test").warning("a stdlib warning from torch's logger tree")
            logging.getLogger("surge_csv").warning("a stdlib warning from a plugin's logger")
        return super().training_step(batch, batch_idx)
"""


def _run(tmp_path: Path, level: str | None = None) -> str:
    """``surge fit`` of ``StopsAndWarns``; returns its stderr."""
    (tmp_path / "loglevel_case.py").write_text(MODEL)
    env = dists.child_env([tmp_path], **({"SURGE_LOG_LEVEL": level} if level else {}))
    args = [
        "--model.class_path=loglevel_case.StopsAndWarns",
        "--data.class_path=surge.testing.TinyDataModule",
        "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=2",
        f"--trainer.default_root_dir={tmp_path / 'root'}",
    ]
    rc, out, err = dists.start([sys.executable, "-m", "surge", "fit", *args], env, tmp_path).wait()
    assert rc == 0, f"{out}\n{err}"
    return err


@pytest.mark.slow
def test_quiet_by_default_but_warnings_pass(tmp_path):
    err = _run(tmp_path)
    assert "stop requested" not in err  # an INFO record
    assert "DEBUG" not in err
    # routed from stdlib logging into Surge's sink (its format), WARNING passes
    assert "WARNING  a stdlib warning from torch's logger tree" in err.splitlines()
    assert "WARNING  a stdlib warning from a plugin's logger" in err.splitlines()


@pytest.mark.slow
def test_log_level_from_environment(tmp_path):
    err = _run(tmp_path, "INFO")
    assert "stop requested: checking the log level" in err


@pytest.mark.slow
def test_log_level_info_shows_surges_lines_and_not_torchs_own(tmp_path):
    err = _run(tmp_path, "INFO")
    assert "INFO     seed set to 0" in err.splitlines()  # `surge fit` seeds as the config says
    assert "INFO     stop requested: checking the log level" in err.splitlines()
    # torch's INFO lines, in its own format ("I1201 16:25:43.661000 14429 torch/_inductor/...] ..."), stay off
    torch_lines = [line for line in err.splitlines() if "torch/_" in line and line[:1] in "IDW"]
    assert not torch_lines, torch_lines


def test_stdlib_records_are_routed_into_loguru():
    route_stdlib("surge_test_plugin")  # as discovery does for each loaded plugin's package
    configure_logging("DEBUG")
    seen = []
    sink = logger.add(lambda message: seen.append(message.record), level=0)
    try:
        logging.getLogger("surge_test_plugin.some.module").info("hello from stdlib")
        logging.getLogger("torch.some.module").info("torch's own INFO: TORCH_LOGS turns it on")
        logging.getLogger("torch.some.module").warning("a warning from torch")
    finally:
        logger.remove(sink)
        configure_logging("WARNING")
    routed = {r["message"]: r for r in seen}
    assert routed["hello from stdlib"]["extra"]["stdlib"] == "surge_test_plugin.some.module"
    assert routed["hello from stdlib"]["level"].name == "INFO"
    assert routed["a warning from torch"]["level"].name == "WARNING"
    assert "torch's own INFO: TORCH_LOGS turns it on" not in routed


@pytest.mark.slow
def test_plugin_trace_is_shown_at_the_default_log_level(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_")}
    env["SURGE_TRACE_PLUGINS"] = "1"
    script = textwrap.dedent(
        """
        import surge
        from surge.testing import EventRecorder, TinyDataModule, TinyModule
        surge.configure_logging()  # a script that wants the command's output asks for it
        trainer = surge.Trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0,
                                default_root_dir={root!r}, plugins=[EventRecorder()])
        trainer.fit(TinyModule(), datamodule=TinyDataModule())
        """
    ).format(root=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "surge trace: train_batch_end ->" in line]
    assert len(lines) == 1 and "event_recorder" in lines[0] and "us" in lines[0]


# A host with its own logging: loguru's default sink, and the stdlib loggers as Python leaves them.
HOST = """
import json, logging, sys
from loguru import logger
import surge
from surge.testing import TinyDataModule, TinyModule

def stdlib(name):
    std = logging.getLogger(name)
    return {"propagate": std.propagate, "handlers": [type(h).__name__ for h in std.handlers], "level": std.level}

before = stdlib("torch")
trainer = surge.Trainer(max_epochs=1, limit_train_batches=2, default_root_dir=sys.argv[1])
trainer.fit(TinyModule(), datamodule=TinyDataModule())
plugins = sorted(r.module for r in trainer.catalog.records.values() if r.plugin is not None and r.module)
logger.info("the host's own record")
print("RESULT: " + json.dumps({
    "torch": [before, stdlib("torch")],
    "plugins": {name: stdlib(name) for name in plugins},
}))
"""


@pytest.mark.slow
def test_a_trainer_leaves_the_host_logging_alone(tmp_path):
    child = dists.start([sys.executable, "-c", HOST, str(tmp_path / "root")], dists.child_env(), tmp_path)
    result = child.result()
    before, after = result["torch"]
    assert after == before  # as torch set it up on import (its own handler)
    assert result["plugins"]  # the default plugins were loaded, and their stdlib loggers are untouched:
    for name, state in result["plugins"].items():
        assert state == {"propagate": True, "handlers": [], "level": logging.NOTSET}, name
    # The record went through loguru's own default sink (its format), once: no sink was removed or added.
    _, _, err = child.wait()
    lines = [line for line in err.splitlines() if "the host's own record" in line]
    assert len(lines) == 1 and "| INFO     | __main__:" in lines[0], err


# A script using Surge as a library, with a sink of its own that takes every record (as loguru's default one does).
LIBRARY = """
import json, sys
from loguru import logger
import surge
from surge.testing import TinyDataModule, TinyModule

records = []
logger.add(lambda m: records.append([m.record["level"].name, m.record["name"], m.record["message"]]), level=0)
surge.seed_everything(0)
trainer = surge.Trainer(max_epochs=1, limit_train_batches=2, default_root_dir=sys.argv[1], enable_progress_bar=False)
trainer.fit(TinyModule(), datamodule=TinyDataModule(), ckpt_path="last")  # none yet: a WARNING, from scratch
logger.info("the host's own record")
print("RESULT: " + json.dumps(records))
"""


def _library_records(tmp_path: Path, **variables: str) -> list[tuple[str, str, str]]:
    """The records the host's sink got from the script above: (level, module, message)."""
    child = dists.start([sys.executable, "-c", LIBRARY, str(tmp_path / "root")], dists.child_env(**variables), tmp_path)
    return [tuple(record) for record in child.result()]


def _surges(records: list[tuple[str, str, str]], *levels: str) -> list[str]:
    return [message for level, name, message in records if name.startswith("surge") and level in levels]


@pytest.mark.slow
def test_a_trainer_says_in_one_short_line_which_plugins_are_active(tmp_path):
    records = _library_records(tmp_path)
    (line,) = [m for m in _surges(records, "INFO") if "plugins active" in m or "plugin active" in m]
    assert len(line) < 200, line
    assert "no lab profile" in line and "`surge plugins`" in line
    assert "checkpoint" in line and "surge_checkpoint" not in line  # the active plugins by name, not their files
    assert "seed set to 0" in _surges(records, "INFO")  # Surge's INFO lines reach the host's sink...
    assert not _surges(records, "DEBUG", "TRACE")  # ...and its DEBUG ones only when asked for
    assert ("INFO", "__main__", "the host's own record") in records


@pytest.mark.slow
def test_surge_log_level_warning_gives_warnings_only_in_library_use(tmp_path):
    records = _library_records(tmp_path, SURGE_LOG_LEVEL="WARNING")
    assert not _surges(records, "TRACE", "DEBUG", "INFO", "SUCCESS"), records
    (warning,) = _surges(records, "WARNING")
    assert warning.startswith("ckpt_path='last': there is no checkpoint yet")
    assert ("INFO", "__main__", "the host's own record") in records  # the host's sink is as it was


@pytest.mark.slow
def test_surge_log_level_debug_logs_every_loaded_plugin_with_its_file(tmp_path):
    records = _library_records(tmp_path, SURGE_LOG_LEVEL="debug")
    (full,) = [m for m in _surges(records, "DEBUG") if m.startswith("plugins loaded under no lab profile: ")]
    assert "checkpoint (surge-checkpoint " in full and "surge_checkpoint/__init__.py" in full


def test_an_unknown_surge_log_level_is_refused_before_anything_runs(monkeypatch, tmp_path):
    import surge

    monkeypatch.setenv("SURGE_LOG_LEVEL", "LOUD")
    with pytest.raises(ValueError, match=r"SURGE_LOG_LEVEL='LOUD' is not a log level; use one of TRACE, DEBUG, INFO"):
        surge.Trainer(default_root_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())
