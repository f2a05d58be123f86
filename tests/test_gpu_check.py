"""``benchmarks/gpu_check.py`` (``make test-gpu``) where there is no GPU: it refuses with exit status 2, and its
CPU dry run (``--device cpu --quick``) runs the checks' real code, reports each one and exits by the results.
No timing is asserted."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


@pytest.fixture
def g(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script as a module; the variable its import sets is put back after the test."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8"))
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    return importlib.import_module("gpu_check")


def _check(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    report = tmp_path / "report.md"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--markdown", str(report), *args],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    return done.returncode, done.stdout + done.stderr, report.read_text()


def _rows(report: str) -> dict[str, tuple[str, str]]:
    """The summary table: the check's letter to its result and summary."""
    rows = re.findall(r"^\| (\w)\. [^|]+ \| (PASS|FAIL|SKIPPED) \| [\d.]+ \| (.*) \|$", report, re.M)
    return {letter: (status, summary) for letter, status, summary in rows}


def test_without_a_cuda_device_nothing_is_checked_and_the_status_is_2(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no device even on a GPU machine
    status, output, report = _check(tmp_path, env=env)
    assert status == 2, output
    assert "no CUDA device: nothing checked" in output and "no CUDA device: nothing checked" in report
    assert "--device cpu" in report and "PASS" not in report


def test_cpu_dry_run_checks_parity_precision_and_syncs(tmp_path: Path) -> None:
    status, output, report = _check(tmp_path, "--device", "cpu", "--quick", "--checks", "parity,precision,syncs")
    assert status == 0, output
    assert "CPU dry run" in report
    rows = _rows(report)
    assert rows["a"] == ("PASS", "8 steps: every loss and state tensor bit-identical")  # 2 epochs of 4 batches
    assert rows["b"] == ("PASS", "bf16-mixed bit-identical; 16-mixed bit-identical")
    assert rows["d"][0] == "PASS"
    assert rows["c"] == rows["e"] == ("SKIPPED", "not selected (--checks)")
    # 2 epochs of 6 steps, a CSV write every 4 steps: 9 steps without a write, 3 with one, which the counter sees
    for precision in ("32-true", "bf16-mixed"):
        assert f"{precision}: 0 of 9 steps without a write synchronised" in rows["d"][1]
        line = re.search(rf"^- {precision} \(judged\): (.*)$", report, re.M)
        assert line is not None, report
        assert "9 steps without a write: syncs 0, reads 0 in all" in line[1]
        reads = re.search(r"3 steps with a write: syncs 0/0/0, reads (\d+)/[\d.]+/(\d+)", line[1])
        assert reads is not None and int(reads[1]) >= 1, line[1]


@pytest.mark.slow
def test_cpu_dry_run_checks_ddp_on_two_processes_and_the_overhead_benchmark(tmp_path: Path) -> None:
    status, output, report = _check(tmp_path, "--device", "cpu", "--quick", "--checks", "ddp,overhead")
    assert status == 0, output
    rows = _rows(report)
    assert rows["c"][0] == "PASS" and rows["c"][1].startswith("2 x gloo: equal to torch DDP bit for bit")
    assert "- surge vs torch DDP: bit-identical on every rank" in report
    assert rows["e"][0] == "PASS"
    assert re.search(r"^\| tiny \| raw \| [\d.]+ \| 1\.000 \| 1\.000 \|$", report, re.M)
    assert re.search(r"^\| tiny \| surge-default \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", report, re.M)


def test_overhead_benchmark_on_cuda_without_a_device_refuses_before_measuring(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``overhead.py --device cuda --quick`` where torch sees no device, its ``main`` called in this process (the
    refusal comes from its argument parsing: a fresh interpreter would only add its imports)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # no device even on a GPU machine
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    overhead = importlib.import_module("overhead")
    with pytest.raises(SystemExit) as exit_:
        overhead.main(["--device", "cuda", "--quick"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and not out
    assert "--device cuda: torch.cuda.is_available() is False" in err and "--device cpu" in err


def _runner(tmp_path: Path, checks: str, budget: float, grace: float) -> tuple[int, str]:
    """``run_checks`` on made-up checks, in a child (its budget alarm is SIGALRM, pytest-timeout's signal)."""
    report = tmp_path / "runner.md"
    program = textwrap.dedent(
        f"""
        import os, signal, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(SCRIPT.parent)!r})
        import gpu_check as g
        import torch

        def boom(ctx):
            raise ValueError("broken on purpose")

        def fine(ctx):
            return g.Result("PASS", "fine")

        def sleeps(ctx):
            time.sleep(120)

        def stuck(ctx):  # deaf to the budget's alarm, as a call stuck in native code is
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(120)

        checks = [g.Check(f.__name__, f.__name__, f) for f in ({checks})]
        report = g.Report(["- made-up checks"], Path({str(report)!r}))
        ctx = g.Context(torch.device("cpu"), g.QUICK, True, Path({str(tmp_path)!r}), time.monotonic() + {budget})
        g.run_checks(checks, ctx, report, {budget}, grace={grace})
        report.finish()
        os._exit(1 if report.failed else 0)
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=100)
    return done.returncode, report.read_text()


def test_a_failing_check_is_reported_with_its_traceback_and_the_next_check_runs(tmp_path: Path) -> None:
    status, report = _runner(tmp_path, "boom, fine, sleeps, fine", budget=3, grace=30)
    assert status == 1
    results = re.findall(r"^\| (\w+) \| (PASS|FAIL|SKIPPED) \| [\d.]+ \| (.*) \|$", report, re.M)
    assert [(name, result) for name, result, _ in results] == [
        ("boom", "FAIL"),
        ("fine", "PASS"),
        ("sleeps", "FAIL"),
        ("fine", "FAIL"),
    ]
    assert results[0][2] == "ValueError: broken on purpose"
    assert "Traceback (most recent call last)" in report and ", in boom\n" in report  # the check's frame
    assert "BudgetSpent: the budget of 3 s (--budget) was spent while this check ran" in results[2][2]
    assert results[3][2].startswith("not run: the budget of 3 s was spent before it")


def test_a_check_deaf_to_the_budget_ends_the_run_with_the_report_so_far(tmp_path: Path) -> None:
    status, report = _runner(tmp_path, "fine, stuck, fine", budget=1, grace=1)
    assert status == 1
    assert "| fine | PASS |" in report and "| stuck |" not in report  # what finished, and nothing after it
    assert "**HARD STOP**: the check `stuck` did not return within the budget + 1 s; exiting" in report


def test_differences_name_the_step_and_the_tensor(g: ModuleType) -> None:
    weights = {"w": torch.ones(3), "b": torch.zeros(1)}
    want = g.Run(torch.tensor([1.0, 0.5, 0.25]), weights, 3)
    assert g.differences(g.Run(want.losses.clone(), dict(weights), 3), want) == []
    got = g.Run(torch.tensor([1.0, 0.5, 0.25 + 2**-22]), {"w": torch.tensor([1.0, 1.0, 1.5]), "b": torch.zeros(1)}, 3)
    assert g.differences(got, want) == [
        "per-step losses differ from step 3: surge 0.2500002384185791, hand-written 0.25",
        "state tensor w differs: max |difference| 0.5",
    ]
    # within DDP_RTOL/DDP_ATOL the loss passes, the weight does not
    assert g.differences(got, want, exact=False, against="one process") == [
        "state tensor w differs: max |difference| 0.5"
    ]


def test_a_host_read_on_every_step_fails_the_syncs_check_and_says_where(
    g: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logging_step = g.ConvModule.training_step

    def reading_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = logging_step(self, batch, batch_idx)
        if loss.item() < 0:  # a host read, as a training step that checks its loss would make
            raise AssertionError
        return loss

    monkeypatch.setattr(g.ConvModule, "training_step", reading_step)
    ctx = g.Context(torch.device("cpu"), g.QUICK, True, tmp_path, deadline=float("inf"))
    result = g.check_syncs(ctx)
    assert result.status == "FAIL"
    assert result.summary.startswith("32-true: 9 of 9 steps without a write synchronised")
    where = [line for line in result.details if "x read " in line and "test_gpu_check.py" in line]
    assert where and where[0].startswith("32-true:   9 x read ")


def test_make_test_gpu_runs_the_check_in_the_venv_with_the_chosen_torch(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.fail("make is not installed: the Makefile's targets cannot be checked")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    index = (tmp_path / "index").as_uri()
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "test-gpu", f"VENV={tmp_path / 'venv'}", f"TORCH_INDEX_URL={index}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    plan = done.stdout.splitlines()
    assert any(f'--index-url "{index}" "torch==2.13.0"' in line for line in plan)
    assert plan[-1].strip() == f"{tmp_path / 'venv'}/bin/python benchmarks/gpu_check.py --markdown gpu-check.md"
