"""``retool-data``: get the reference run's data and model, then convert the data for a profile.

    retool-data download [--source hf|modelscope] [--out data/raw] [--models models] [--only NAME ...] [--check-only]
    retool-data prepare --profile reference|improved [--raw data/raw] [--out data/PROFILE]

``download`` fetches ReTool-SFT, DAPO-Math-17k, AIME 2025 and Qwen3-4B-Instruct-2507 (retool.data.fetch), checks
row counts and model files, and prints the paths the launchers expect. ``prepare`` writes retool_sft.parquet,
dapo_math_17k.parquet and aime_2025.parquet for the profile (retool.data.prepare), where the launchers read them
(DATA_DIR=data/$PROFILE).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retool.data.fetch import ASSETS, BUNDLED, SOURCES, DownloadError, asset_dir, check, download
from retool.data.io import ConversionError, DataSourceError
from retool.data.layout import DEFAULT_MODELS, DEFAULT_RAW, data_dir
from retool.data.prepare import Inputs, ProfileMismatch, describe, prepare_profile
from retool.profiles import DEFAULT_PROFILE, PROFILES
from retool.tool_yaml import ToolConfigError


def _repo_override(text: str) -> tuple[str, str]:
    name, sep, repo = text.partition("=")
    if not sep or name not in ASSETS or not repo:
        raise argparse.ArgumentTypeError(f"expected NAME=ID with NAME one of {', '.join(ASSETS)}, got {text!r}")
    return name, repo


def run_download(args: argparse.Namespace) -> int:
    names = args.only or list(ASSETS)
    overrides = dict(args.repo)
    lines, failures = [], []
    for name in names:
        asset = ASSETS[name]
        folder = asset_dir(asset, args.out, args.models)
        try:
            if not args.check_only:
                repo = asset.repo(args.source, overrides)
                origin = "the recipe's own copy (no ModelScope copy)" if repo == BUNDLED else f"{args.source}:{repo}"
                print(f"==> {name}: {origin} -> {folder}", flush=True)
                download(asset, args.source, folder, args.endpoint, overrides)
            lines.append(check(asset, folder))
        except DownloadError as exc:
            failures.append(str(exc))
    if lines:
        print("\n".join(lines))
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    if failures:
        return 1
    model = (args.models / ASSETS["model"].folder).resolve()
    print(
        f"\nnext, per profile (reference | improved):\n"
        f"  retool-data prepare --profile {DEFAULT_PROFILE} --raw {args.out}\n"
        f"  MODEL_PATH={model} PROFILE={DEFAULT_PROFILE} ./run_qwen3_4b_sft_npu.sh"
    )
    return 0


def run_prepare(args: argparse.Namespace) -> int:
    out = args.out or data_dir(args.profile)
    defaults = Inputs.under(args.raw)
    inputs = Inputs(args.sft or defaults.sft, args.dapo or defaults.dapo, args.aime or defaults.aime)
    try:
        summaries = prepare_profile(args.profile, inputs, out, on_error=args.on_error)
    except (DataSourceError, ToolConfigError) as exc:
        print(
            f"retool-data prepare: error: {exc} (download the sets with `retool-data download`, or pass "
            "--sft/--dapo/--aime)",
            file=sys.stderr,
        )
        return 2
    except (ConversionError, ProfileMismatch) as exc:
        print(f"retool-data prepare: error: {exc}", file=sys.stderr)
        return 1
    print(describe(summaries))
    model = (DEFAULT_MODELS / ASSETS["model"].folder).resolve()
    print(
        f"\n{out} holds what the launchers read for PROFILE={args.profile}:\n"
        f"  PROFILE={args.profile} DATA_DIR={out.resolve()} MODEL_PATH={model} ./run_qwen3_4b_sft_npu.sh"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retool-data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    down = sub.add_parser("download", help="download the data sets and the model, then check them")
    down.add_argument(
        "--source",
        choices=SOURCES,
        default="hf",
        help="hf: the Hugging Face hub or the mirror in HF_ENDPOINT (default); modelscope: ModelScope",
    )
    down.add_argument("--out", type=Path, default=DEFAULT_RAW, help="folder for the data sets (default: %(default)s)")
    down.add_argument("--models", type=Path, default=DEFAULT_MODELS, help="folder for the model (default: %(default)s)")
    down.add_argument("--only", nargs="+", choices=list(ASSETS), help="only these assets (default: all four)")
    down.add_argument(
        "--endpoint",
        default=None,
        help="Hugging Face endpoint, e.g. https://hf-mirror.com (default: $HF_ENDPOINT, else the hub)",
    )
    down.add_argument(
        "--repo",
        type=_repo_override,
        action="append",
        default=[],
        metavar="NAME=ID",
        help="download NAME from the id ID instead (repeatable)",
    )
    down.add_argument(
        "--check-only",
        action="store_true",
        help="download nothing; check folders that are already there (copied from another host)",
    )
    prep = sub.add_parser("prepare", help="convert the downloaded sets for a profile")
    prep.add_argument("--profile", choices=sorted(PROFILES), required=True)
    prep.add_argument(
        "--raw", type=Path, default=DEFAULT_RAW, help="where `download` put the sets (default: %(default)s)"
    )
    prep.add_argument("--out", type=Path, default=None, help="output folder (default: data/<profile>)")
    prep.add_argument("--sft", type=Path, default=None, help="ReTool-SFT folder or file (default: <raw>/ReTool-SFT)")
    prep.add_argument(
        "--dapo", type=Path, default=None, help="DAPO-Math-17k folder or file (default: <raw>/DAPO-Math-17k)"
    )
    prep.add_argument("--aime", type=Path, default=None, help="AIME 2025 folder or file (default: <raw>/aime_2025)")
    prep.add_argument(
        "--on-error",
        choices=("skip", "fail"),
        default="skip",
        help="skip rows that cannot be converted (reported) or stop at the first (default: %(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_download(args) if args.command == "download" else run_prepare(args)


if __name__ == "__main__":
    sys.exit(main())
