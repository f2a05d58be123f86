from collections.abc import Sequence
from pathlib import Path

import rich
import rich.syntax
import rich.tree
from hydra.core.hydra_config import HydraConfig
from lightning_utilities.core.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict

from src.utils import pylogger

log = pylogger.RankedLogger(__name__, rank_zero_only=True)


@rank_zero_only
def print_config_tree(
    cfg: DictConfig,
    print_order: Sequence[str] = ("data", "model", "callbacks", "logger", "trainer", "paths", "extras"),
    resolve: bool = False,
    save_to_file: bool = False,
) -> None:
    """Print the config as a Rich tree, the groups of ``print_order`` first; optionally into the output folder."""
    tree = rich.tree.Tree("CONFIG", style="dim", guide_style="dim")
    queue = [field for field in print_order if field in cfg]
    queue += [field for field in cfg if field not in queue]
    for field in queue:
        branch = tree.add(field, style="dim", guide_style="dim")
        value = cfg[field]
        text = OmegaConf.to_yaml(value, resolve=resolve) if isinstance(value, DictConfig) else str(value)
        branch.add(rich.syntax.Syntax(text, "yaml"))
    rich.print(tree)
    if save_to_file:
        with open(Path(cfg.paths.output_dir, "config_tree.log"), "w") as file:
            rich.print(tree, file=file)


@rank_zero_only
def enforce_tags(cfg: DictConfig, save_to_file: bool = False) -> None:
    """A run must have tags: refuse one without (the template prompts for them; a test cannot answer)."""
    if not cfg.get("tags"):
        if "id" in HydraConfig().cfg.hydra.job:
            raise ValueError("a multirun needs tags: give `tags=[...]`")
        with open_dict(cfg):
            cfg.tags = ["dev"]
        log.warning("No tags provided in config. Using the default tag 'dev'.")
    if save_to_file:
        with open(Path(cfg.paths.output_dir, "tags.log"), "w") as file:
            rich.print(cfg.tags, file=file)
