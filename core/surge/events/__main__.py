"""``python -m surge.events --markdown [FILE]``: print the events tables of docs/events.md, or rewrite them in FILE."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from surge.events import markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m surge.events", description=__doc__)
    parser.add_argument("--markdown", action="store_true", required=True, help="the tables, from the event classes")
    parser.add_argument("file", nargs="?", type=Path, help="rewrite the tables between their markers in this file")
    args = parser.parse_args(argv)
    if args.file is None:
        for name, body in markdown.blocks().items():
            print(f"{name}:\n\n{body}")
        return 0
    text = args.file.read_text(encoding="utf-8")
    try:
        updated = markdown.update(text)
    except ValueError as exc:
        print(f"python -m surge.events: {args.file}: {exc}", file=sys.stderr)
        return 1
    if updated != text:
        args.file.write_text(updated, encoding="utf-8")
    print(f"{args.file}: the events tables are {'rewritten' if updated != text else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
