"""A plugin's settings, declared once: the constructor's typed signature (``surge.settings_model``,
``@surge.validated``). The model run configs, the command line and help texts use is derived from it, and a
direct construction is checked by the same model."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import pytest
import surge
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from surge.cli import main
from surge.testing import PluginEnv
from surge_callbacks import EarlyStopping, Timer
from surge_checkpoint import ModelCheckpoint
from surge_progress import ProgressBar, ProgressConfig
from surge_swa import ExponentialMovingAverage, StochasticWeightAveraging

if TYPE_CHECKING:
    from collections.abc import Callable

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def _even(value: int) -> int:
    if value % 2:
        raise ValueError("must be even")
    return value


def _ordered(settings: Any) -> None:
    if settings.low > settings.high:
        raise ValueError(f"low={settings.low} is above high={settings.high}; swap them")


class Sampler:
    """Samples the loss.

    Args:
        every: Sample every this many
            optimizer steps (0: never).
        low: The smallest value kept.
        high: The largest value kept.
    """

    @surge.validated(check=_ordered)
    def __init__(
        self,
        every: Annotated[int, Field(ge=0), AfterValidator(_even)] = 2,
        low: float = 0.0,
        high: float = 1.0,
    ) -> None:
        self.every, self.low, self.high = every, low, high


# -- the derived model ------------------------------------------------------------------------------------


def test_the_model_is_the_signature_with_the_docstring() -> None:
    model = surge.settings_model(Sampler)
    assert list(model.model_fields) == ["every", "low", "high"]
    every = model.model_fields["every"]
    assert every.default == 2 and every.annotation is int
    assert every.description == "Sample every this many optimizer steps (0: never)."
    assert model.model_fields["high"].description == "The largest value kept."
    assert surge.settings_model(Sampler) is model  # derived once, the one @surge.validated checks with
    parameters = inspect.signature(Sampler).parameters  # the decorator keeps the signature
    assert [(p.name, p.default) for p in parameters.values()] == [("every", 2), ("low", 0.0), ("high", 1.0)]


def test_a_direct_construction_gets_validated_values_and_refusals() -> None:
    sampler = Sampler(4, high=2)
    assert (sampler.every, sampler.low, sampler.high) == (4, 0.0, 2.0)
    assert isinstance(sampler.high, float)  # coerced as a run config's value is
    with pytest.raises(TypeError, match="unexpected keyword argument 'hihg'"):  # Python's own refusal (and mypy's)
        Sampler(every=4, hihg=2)  # type: ignore[call-arg]
    with pytest.raises(surge.ConfigError) as info:
        Sampler(every=-2)
    assert info.value.problems == [("Sampler.every", "got -2: Input should be greater than or equal to 0")]
    assert info.value.source == "Sampler(...)"
    with pytest.raises(surge.ConfigError) as info:
        Sampler(every=3)
    assert info.value.problems == [("Sampler.every", "got 3: Value error, must be even")]
    with pytest.raises(surge.ConfigError) as info:
        Sampler(low=2.0, high=1.0)
    assert info.value.problems == [("Sampler", "low=2.0 is above high=1.0; swap them")]


def test_a_plugin_without_config_derives_it_from_its_factory(plugin_env: PluginEnv, make_trainer: Any) -> None:
    plugin = surge.Plugin(name="sampler", kind="participant", factory=Sampler)
    assert plugin.config is surge.settings_model(Sampler)
    plugin_env.add(plugin)
    with pytest.raises(surge.ConfigError) as info:
        make_trainer(plugins={"sampler": {"every": -2, "lo": 1}})
    assert info.value.problems == [
        ("trainer.plugins.sampler.every", "got -2: Input should be greater than or equal to 0"),
        ("trainer.plugins.sampler.lo", "unknown argument; did you mean 'low'?"),
    ]
    with pytest.raises(surge.ConfigError, match=r"trainer.plugins.sampler: low=2.0 is above high=1.0; swap them"):
        make_trainer(plugins={"sampler": {"low": 2.0, "high": 1.0}})


def test_an_explicit_model_still_wins() -> None:
    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        every: int = 5

    assert surge.Plugin(name="sampler", kind="participant", factory=Sampler, config=Settings).config is Settings


def test_a_signature_that_cannot_be_derived_is_refused_at_declaration() -> None:
    def factory(every: NotImportedAtRunTime = 1) -> object:  # type: ignore[name-defined]  # noqa: F821
        return object()

    with pytest.raises(surge.PluginError) as info:
        surge.Plugin(name="broken", kind="participant", factory=factory)
    text = str(info.value)
    assert "invalid surge.Plugin declaration 'broken'" in text and "NotImportedAtRunTime" in text
    assert "not only under TYPE_CHECKING" in text and "surge.Plugin(config=...)" in text


def test_keyword_arguments_let_unknown_settings_through() -> None:
    def factory(every: int = 1, **rest: Any) -> object:
        return object()

    model = surge.settings_model(factory)
    assert model.model_validate({"every": "3", "other": 1}).model_dump() == {"every": 3, "other": 1}


# -- first-party plugins: one model, both ways -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls", "settings", "expected"),
    [
        (
            "progress",
            ProgressBar,
            {"refresh_rate": -1},
            [("refresh_rate", "got -1: Input should be greater than or equal to 0")],
        ),
        (
            "progress",
            ProgressBar,
            {"refresh_rate": "many"},
            [("refresh_rate", "got 'many': Input should be a valid integer, unable to parse string as an integer")],
        ),
        (
            "progress",
            ProgressBar,
            {"mode": "fancy"},
            [("mode", "got 'fancy': Input should be 'auto', 'rich' or 'plain'")],
        ),
        (
            "early_stopping",
            EarlyStopping,
            {"patience": -1},
            [("patience", "got -1: Input should be greater than or equal to 0")],
        ),
        ("timer", Timer, {"duration": "soon"}, None),
        ("ema", ExponentialMovingAverage, {"start_step": 1, "start_epoch": 1}, None),
        ("swa", StochasticWeightAveraging, {"device": "nowhere"}, None),
        ("checkpoint", ModelCheckpoint, {"save_top_k": 3}, None),
    ],
)
def test_a_direct_construction_and_a_run_config_raise_the_same_problem(
    make_trainer: Any, name: str, cls: Callable[..., object], settings: dict[str, Any], expected: Any
) -> None:
    with pytest.raises(surge.ConfigError) as given:
        make_trainer(plugins={name: settings})
    with pytest.raises(surge.ConfigError) as built:
        cls(**settings)
    prefix = f"trainer.plugins.{name}"
    from_config = [(path.removeprefix(prefix).lstrip("."), message) for path, message in given.value.problems]
    direct = [(path.removeprefix(cls.__name__).lstrip("."), message) for path, message in built.value.problems]
    assert from_config == direct
    assert all(path.startswith(prefix) for path, _ in given.value.problems)
    if expected is not None:
        assert direct == expected


def test_the_run_config_names_an_unknown_setting(make_trainer: Any) -> None:
    with pytest.raises(surge.ConfigError) as info:
        make_trainer(plugins={"progress": {"refresh_rat": 2}})
    assert info.value.problems == [
        ("trainer.plugins.progress.refresh_rat", "unknown argument; did you mean 'refresh_rate'?")
    ]


def test_lightning_constructors_keep_their_signatures() -> None:
    names = list(inspect.signature(ModelCheckpoint).parameters)
    assert names[:9] == [
        "dirpath",
        "filename",
        "monitor",
        "verbose",
        "save_last",
        "save_top_k",
        "save_weights_only",
        "mode",
        "auto_insert_metric_name",
    ]
    assert ModelCheckpoint("ckpts", "{epoch}", "val_loss").monitor == "val_loss"  # positional, as Lightning's


def test_help_keeps_each_settings_description(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = capsys.readouterr().out
    assert "--plugins.progress.refresh_rate  int (default: 1)" in out
    assert "At least this many batches between two refreshes; ``0`` switches the bar off." in out
    assert "--plugins.checkpoint.on_save_error  'raise' | 'warn' (default: 'raise')" in out
    # a provider's settings too (issue 26): surge-devices' CPU threads, under the provider's line
    provider = "devices (surge-devices 0.1.0, provider; accelerator: cpu, cuda, gpu, mps; strategy: single_device)"
    assert f"  {provider}" in out
    assert "    --plugins.devices.cpu_threads  int | null (default: None)\n        Intra-op threads torch uses" in out
    assert ProgressConfig.model_fields["plain_interval"].description == (
        "Plain mode: a line every this many seconds (``None``: no timed lines)."
    )


# -- the check that keeps it so ----------------------------------------------------------------------------


def _repeated_settings(path: Path) -> list[str]:
    """Where a module both defines a pydantic model and repeats its fields in a constructor: as parameters
    of an ``__init__``, or copied one by one (``self.x = config.x``)."""
    tree = ast.parse(path.read_text(), str(path))
    fields: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(base, ast.Name) and (base.id == "BaseModel" or base.id.endswith("Config")) for base in node.bases
        ):
            fields |= {
                s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
    fields.discard("model_config")
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == "__init__"):
            continue
        repeated = sorted(fields & {a.arg for a in [*node.args.args, *node.args.kwonlyargs]})
        if len(repeated) > 1:
            found.append(f"{path.name}:{node.lineno} __init__ repeats {repeated}")
        for statement in ast.walk(node):
            value = getattr(statement, "value", None)
            if (
                isinstance(statement, ast.Assign)
                and isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id == "config"
                and value.attr in fields
            ):
                found.append(f"{path.name}:{statement.lineno} copies config.{value.attr}")
    return found


def test_no_plugin_declares_its_settings_twice() -> None:
    sources = sorted(PLUGINS.glob("surge-*/src/**/*.py"))
    assert len(sources) > 30
    found = [line for path in sources for line in _repeated_settings(path)]
    assert found == [], "declare settings once, in the constructor (surge.settings_model):\n" + "\n".join(found)


def test_the_check_finds_the_old_form(tmp_path: Path) -> None:
    old = tmp_path / "old.py"
    old.write_text(
        "class BarConfig(BaseModel):\n    rate: int = 1\n    leave: bool = False\n\n"
        "class Bar:\n    def __init__(self, rate: int = 1, leave: bool = False) -> None:\n"
        "        config = BarConfig(rate=rate, leave=leave)\n        self.rate = config.rate\n"
    )
    assert _repeated_settings(old) == ["old.py:6 __init__ repeats ['leave', 'rate']", "old.py:8 copies config.rate"]
