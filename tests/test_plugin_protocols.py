"""The optional members of a plugin object (surge.events.protocols), checked when it joins a run: present but
malformed is refused at ``Trainer(...)``, naming the plugin and the member, before anything runs or is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import surge
from surge.errors import PluginError


class _Base:
    surge_name = "probe"

    @surge.hookimpl
    def train_batch_end(self, event: Any) -> None: ...


def _with(**members: Any) -> Any:
    return type("Probe", (_Base,), members)()


def _saves(self: Any) -> dict[str, Any]:
    return {}


def _loads(self: Any, state: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"state_dict": _saves}, "has state_dict but not load_state_dict(state)"),
        ({"load_state_dict": _loads}, "has load_state_dict but not state_dict()"),
        ({"state_dict": _saves, "load_state_dict": _loads, "state_key": 3}, "state_key must be a non-empty string"),
        ({"surge_kind": "logger"}, "surge_kind must be one of ['participant', 'observer']"),
        ({"surge_unused_hooks": "train_batch_end"}, "surge_unused_hooks must be a collection of event names"),
        (
            {"surge_unused_hooks": ["train_batch_ennd"]},
            "surge_unused_hooks names ['train_batch_ennd'], which are neither",
        ),
        (
            {"handler_timer": lambda self, event: None},
            "handler_timer must be a method taking (event, name, start, end)",
        ),
    ],
)
def test_a_malformed_member_is_refused_naming_it(
    plugin_env: Any, tmp_path: Path, members: dict[str, Any], message: str
) -> None:
    plugin_env.hide_installed()
    with pytest.raises(
        PluginError,
        match=r"plugin 'probe' .*"
        + message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
        surge.Trainer(plugins=[_with(**members)], default_root_dir=str(tmp_path))
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_well_formed_members_are_accepted(plugin_env: Any, tmp_path: Path) -> None:
    plugin_env.hide_installed()
    probe = _with(
        state_dict=_saves,
        load_state_dict=_loads,
        state_key="probe-state",
        surge_kind="observer",
        surge_unused_hooks=("train_batch_end",),
    )
    trainer = surge.Trainer(plugins=[probe], default_root_dir=str(tmp_path))
    assert trainer.event_order("train_batch_end") == ["module"]  # switched off for the run, as it asked
