"""``python -m surge_lightning.inventory``: the classification of Lightning's surface, checked and written out.

Without options: compare the classification file with the installed Lightning (``pip install lightning``) and this
repository's tests; print the counts and each problem (unclassified, stale, a test that does not exist); exit 1 on
any. ``--missing``: print the TOML lines a new Lightning needs (refused, with the reasons to write). ``--markdown
[FILE]``: print docs/porting.md's inventory tables, or rewrite them between their markers in FILE (no Lightning
needed).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from surge_lightning.inventory import FILE, load, markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m surge_lightning.inventory", description=__doc__)
    parser.add_argument("--missing", action="store_true", help="print TOML lines for the unclassified names")
    parser.add_argument("--markdown", action="store_true", help="the docs tables, from the classification file")
    parser.add_argument("file", nargs="?", type=Path, help="with --markdown: rewrite the tables in this file")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository, for the tests' node ids")
    args = parser.parse_args(argv)
    inventory = load()
    if args.markdown:
        if args.file is None:
            print(markdown.tables(inventory), end="")
            return 0
        text = args.file.read_text(encoding="utf-8")
        try:
            updated = markdown.update(text, inventory)
        except ValueError as exc:
            print(f"{parser.prog}: {args.file}: {exc}", file=sys.stderr)
            return 1
        if updated != text:
            args.file.write_text(updated, encoding="utf-8")
        print(f"{args.file}: the inventory tables are {'rewritten' if updated != text else 'up to date'}")
        return 0

    from surge_lightning.inventory import check, surface

    lightning = surface.read()
    missing = check.unclassified(lightning, inventory)
    if args.missing:
        print(check.lines_for(missing) if missing else "# nothing to add", end="")
        return 0
    problems = [f"unclassified: [{s}] {n}" if n else f"unclassified module: {s}" for s, n in missing]
    problems += [f"stale: {p}" for p in check.stale(lightning, inventory)]
    problems += [f"hook flag: {p}" for p in check.hook_flags(lightning, inventory)]
    problems += [f"no such test: {p}" for p in check.missing_tests(inventory, args.root)]
    counts = Counter(e.status for e in inventory.entries())
    print(
        f"{FILE.name} against Lightning {lightning.version}: "
        + ", ".join(f"{counts[s]} {s}" for s in ("implemented", "mapped", "refused"))
        + f" ({len(inventory.modules)} of the refused are whole modules)"
    )
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
