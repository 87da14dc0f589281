"""Command line: ``python -m structmat tour``."""

import argparse
import sys

from structmat.tour import main as tour


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m structmat", description="structmat command line")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tour", help="build each mask class, apply each closure op, check against dense")
    t.add_argument("-T", type=int, default=64, help="sequence length, at least 1 (default 64)")
    args = parser.parse_args(argv)
    if args.T < 1:
        t.error(f"-T must be at least 1; got {args.T}")
    return tour(args.T)


if __name__ == "__main__":
    sys.exit(main())
