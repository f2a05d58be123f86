"""``python -m surge_fsdp.consolidate SHARDED.ckpt OUT.ckpt``: one weights-only file from a sharded checkpoint."""

from __future__ import annotations

import argparse
import sys

import surge

from surge_fsdp import consolidate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m surge_fsdp.consolidate", description=__doc__)
    parser.add_argument("checkpoint", help="the sharded checkpoint (the commit file, not its .shards-* directory)")
    parser.add_argument("out", help="where to write the consolidated weights-only checkpoint")
    args = parser.parse_args(argv)
    try:
        consolidate(args.checkpoint, args.out)
    except surge.SurgeError as exc:
        print(f"consolidate: error: {exc}", file=sys.stderr)
        return 1
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
