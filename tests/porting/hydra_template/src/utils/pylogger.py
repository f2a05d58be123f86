import logging
from collections.abc import Mapping

from lightning_utilities.core.rank_zero import rank_prefixed_message, rank_zero_only


class RankedLogger(logging.LoggerAdapter):
    """A logger for several processes: each message carries the rank of its process, and with
    ``rank_zero_only=True`` only rank zero writes."""

    def __init__(
        self,
        name: str = __name__,
        rank_zero_only: bool = False,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(logger=logging.getLogger(name), extra=extra)
        self.rank_zero_only = rank_zero_only

    def log(self, level: int, msg: str, rank: int | None = None, *args, **kwargs) -> None:
        """Log ``msg`` with the rank of this process in front; ``rank`` keeps it to that process."""
        if not self.isEnabledFor(level):
            return
        msg, kwargs = self.process(msg, kwargs)
        current_rank = getattr(rank_zero_only, "rank", None)
        if current_rank is None:
            raise RuntimeError("rank_zero_only.rank is not set: nothing has said which process this is")
        msg = rank_prefixed_message(msg, current_rank)
        if self.rank_zero_only:
            if current_rank == 0:
                self.logger.log(level, msg, *args, **kwargs)
        elif rank is None or current_rank == rank:
            self.logger.log(level, msg, *args, **kwargs)
