"""Writes fspair's Grafana dashboards as JSON, one file per dashboard named after its UID.

Run through scripts/dashboards.sh, which provides the pinned
grafana-foundation-sdk:

    scripts/dashboards.sh generate      # dashboards/*.json
    scripts/dashboards.sh check         # fail on drift

or directly: python3 dashboards/gen/main.py --repo . --out dashboards
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders.dashboard import Dashboard

import disk
import fleet
import hostfs
import inputs
import kdb
from common import UnmodelledError, render

BUILDERS: tuple[Callable[[inputs.Inputs], Dashboard], ...] = (fleet.build, disk.build, hostfs.build, kdb.build)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--repo", type=Path, default=Path("."), help="repository root (reads rules/classes.yaml, rules/kdb/pairs.yaml)"
    )
    ap.add_argument("--out", type=Path, required=True, help="directory for the <uid>.json files")
    args = ap.parse_args()

    try:
        data = inputs.load(args.repo)
    except (OSError, ValueError, KeyError) as err:
        print(f"dashboards: read inputs under {args.repo}: {err}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for build in BUILDERS:
        d = build(data)
        model = d.build()
        path = args.out / f"{model.uid}.json"
        try:
            text = render(d)
        except UnmodelledError as err:
            print(f"dashboards: {model.uid}: {err}", file=sys.stderr)
            return 1
        path.write_text(text, encoding="utf-8")
        print(f"dashboards: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
