import warnings
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

from omegaconf import DictConfig

from src.utils import pylogger, rich_utils

log = pylogger.RankedLogger(__name__, rank_zero_only=True)


def extras(cfg: DictConfig) -> None:
    """What the ``extras`` group asks for before the task: python warnings off, tags enforced, the config printed."""
    if not cfg.get("extras"):
        log.warning("No extras in the config (cfg.extras=null)")
        return
    if cfg.extras.get("ignore_warnings"):
        log.info("Python warnings off (cfg.extras.ignore_warnings)")
        warnings.filterwarnings("ignore")
    if cfg.extras.get("enforce_tags"):
        log.info("Tags required (cfg.extras.enforce_tags)")
        rich_utils.enforce_tags(cfg, save_to_file=True)
    if cfg.extras.get("print_config"):
        log.info("The config (cfg.extras.print_config):")
        rich_utils.print_config_tree(cfg, resolve=True, save_to_file=True)


def task_wrapper(task_func: Callable) -> Callable:
    """Run a task so that a failure is logged and re-raised, and an open wandb run is closed whatever happens."""

    def wrap(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            metric_dict, object_dict = task_func(cfg=cfg)
        except Exception as ex:
            log.exception("")  # into the run's log file
            raise ex
        finally:
            log.info(f"The run wrote into {cfg.paths.output_dir}")
            if find_spec("wandb"):
                import wandb

                if wandb.run:
                    log.info("Finishing the wandb run")
                    wandb.finish()
        return metric_dict, object_dict

    return wrap


def get_metric_value(metric_dict: dict[str, Any], metric_name: str | None) -> float | None:
    """The value of ``metric_name`` in ``metric_dict`` (for hyper-parameter searches), or None without a name."""
    if not metric_name:
        log.info("No metric to optimize: nothing to return")
        return None
    if metric_name not in metric_dict:
        raise KeyError(
            f"no metric {metric_name!r} was logged (logged: {sorted(metric_dict)}): check the name the module logs "
            "and the config's `optimized_metric`"
        )
    metric_value = metric_dict[metric_name].item()
    log.info(f"{metric_name} = {metric_value}")
    return metric_value
