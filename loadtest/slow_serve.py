"""`speechd serve` on a simulated slow device: the real api, worker, store and scheduler, with
the cost-model engine of `loadtest._slow` loaded in the worker in place of Kokoro-82M.

    python -m loadtest.slow_serve [--rtf 1.3] [--overhead 0.4] [--batch-curve gpu] \
        -- serve --port 8000 ...

`--batch-curve gpu` makes the cost model batch as a GPU does (`loadtest._slow.GPU_CURVE`),
for `--max-batch` to measure and use.

Everything after `--` is `speechd`'s own command line (the `serve` command only).
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Sequence

from ._slow import GPU_CURVE, OVERHEAD_S, RTF, load_slow_engine


def main(argv: Sequence[str] | None = None) -> int:
    from speechd.cli import build_parser, run_api
    from speechd.config import SettingsError, load_settings
    from speechd.worker import Parts, Supervisor

    argv = list(sys.argv[1:] if argv is None else argv)
    own, rest = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :])
        if "--" in argv
        else (
            argv,
            ["serve"],
        )
    )
    parser = argparse.ArgumentParser(prog="python -m loadtest.slow_serve", description=__doc__)
    parser.add_argument("--rtf", type=float, default=RTF, help=f"compute s per audio s ({RTF})")
    parser.add_argument("--overhead", type=float, default=OVERHEAD_S, help="s per model call")
    parser.add_argument(
        "--batch-curve",
        choices=["none", "gpu"],
        default="none",
        help="batch as a GPU does (cost per item ~0.3x at batch 8), or not at all (none)",
    )
    args = parser.parse_args(own)
    speechd = build_parser()
    given = speechd.parse_args(rest)
    if given.command != "serve":
        speechd.error("only `serve` runs on the slow device")
    flags = {k: v for k, v in vars(given).items() if k != "command"}
    try:
        settings = load_settings(flags)
    except SettingsError as exc:
        speechd.error(str(exc))
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    curve = GPU_CURVE if args.batch_curve == "gpu" else None
    loader = functools.partial(
        load_slow_engine, rtf=args.rtf, overhead_s=args.overhead, batch_curve=curve
    )
    supervisor = Supervisor(settings.worker_config(), parts=Parts(load_engine=loader))
    return run_api(settings, supervisor=supervisor)


if __name__ == "__main__":
    sys.exit(main())
