"""Logging goes through loguru: quiet by default, SURGE_LOG_LEVEL to change it, stdlib records routed in."""

import logging
import os
import subprocess
import sys
import textwrap

from loguru import logger
from surge._logging import configure_logging

SCRIPT = textwrap.dedent(
    """
    import logging, surge
    from surge.testing import TinyDataModule, TinyModule
    surge.seed_everything(0)
    trainer = surge.Trainer(max_epochs=1, limit_train_batches=2, default_root_dir={root!r})
    trainer.fit(TinyModule(), datamodule=TinyDataModule())
    trainer.request_stop("checking the log level")
    logging.getLogger("torch.surge_test").warning("a stdlib warning from torch's logger tree")
    """
)


def _run(tmp_path, level=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_")}
    if level:
        env["SURGE_LOG_LEVEL"] = level
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=str(tmp_path))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_quiet_by_default_but_warnings_pass(tmp_path):
    err = _run(tmp_path)
    assert "stop requested" not in err  # an INFO record
    assert "DEBUG" not in err
    assert "a stdlib warning from torch's logger tree" in err  # routed from stdlib logging, WARNING passes


def test_log_level_from_environment(tmp_path):
    err = _run(tmp_path, "INFO")
    assert "stop requested: checking the log level" in err


def test_stdlib_records_are_routed_into_loguru():
    configure_logging("DEBUG")
    seen = []
    sink = logger.add(lambda message: seen.append(message.record), level=0)
    try:
        logging.getLogger("torch.some.module").info("hello from stdlib")
    finally:
        logger.remove(sink)
        configure_logging("WARNING")
    routed = [r for r in seen if r["message"] == "hello from stdlib"]
    assert routed and routed[0]["extra"]["stdlib"] == "torch.some.module"
    assert routed[0]["level"].name == "INFO"


def test_plugin_trace_is_shown_at_the_default_log_level(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SURGE_")}
    env["SURGE_TRACE_PLUGINS"] = "1"
    script = textwrap.dedent(
        """
        import surge
        from surge.testing import EventRecorder, TinyDataModule, TinyModule
        trainer = surge.Trainer(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0,
                                default_root_dir={root!r}, plugins=[EventRecorder()])
        trainer.fit(TinyModule(), datamodule=TinyDataModule())
        """
    ).format(root=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "surge trace: train_batch_end ->" in line]
    assert len(lines) == 1 and "event_recorder" in lines[0] and "us" in lines[0]
