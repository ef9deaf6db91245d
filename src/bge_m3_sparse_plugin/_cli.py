"""``bge-m3-sparse``: the plugin's command line (``python -m bge_m3_sparse_plugin`` too).

Each subcommand imports what it needs when it runs, so that ``--help`` is quick.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``index``, ``doctor`` and ``cpu-env``."""
    from .index import _command as index_command

    parser = argparse.ArgumentParser(prog="bge-m3-sparse", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    index = commands.add_parser(
        "index",
        help="turn a corpus into sparse (and dense) vectors, in Parquet shards",
        usage="bge-m3-sparse index INPUT [INPUT ...] OUTPUT --model MODEL [options]",
        description="Turn a corpus into BGE-M3 sparse (and dense) vectors, in Parquet shards, "
        "resumably.",
        epilog=index_command.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    index_command.add_arguments(index)
    index.set_defaults(parser=index)  # its errors name the subcommand's usage
    doctor = commands.add_parser(
        "doctor",
        help="check this install (and a model folder) for what stops the plugin, with fixes",
        description="Check this install, and MODEL if given, for what stops the plugin from working; "
        "print each problem with the command that fixes it. Exit 1 when a problem was found.",
    )
    doctor.add_argument(
        "model", nargs="?", metavar="MODEL", help="a model folder or Hugging Face name"
    )
    commands.add_parser(
        "cpu-env",
        help="print the export line that binds vLLM to every core of this machine",
        description="Print the shell line that binds vLLM's CPU build to every core of this "
        'machine, for eval "$(bge-m3-sparse cpu-env)". The index command binds its engine so '
        "by itself.",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "index":
        from .index import _command as index_command

        return index_command.run(args, args.parser)
    if args.command == "doctor":
        from . import _doctor as doctor_module

        return doctor_module.run(args.model)
    if args.command == "cpu-env":
        from ._config import cpu_binding

        print("export " + " ".join(f"{key}={value}" for key, value in cpu_binding().items()))
        return 0
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
