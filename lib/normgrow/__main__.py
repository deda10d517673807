"""Command line: python -m normgrow SUBCOMMAND ... (one subparser per subcommand; add new ones in build_parser)."""
from __future__ import annotations

import argparse


def _export(args: argparse.Namespace) -> None:
    from .export import export_student

    print(export_student(args.src, args.out_dir, force=args.force)["message"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m normgrow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="export a student: Qwen3ForCausalLM (pre-norm) or normgrow checkpoint (post)")
    export.add_argument("src", help="a run dir (uses checkpoints/final.pt) or a checkpoint .pt file")
    export.add_argument("out_dir", help="output folder (created; never a run directory or inside outputs/runs)")
    export.add_argument("--force", action="store_true",
                        help="write into an existing non-empty folder (overwrites the exported files; deletes nothing)")
    export.set_defaults(func=_export)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
