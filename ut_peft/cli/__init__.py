"""ut-peft's commands, runnable from an installed package (no checkout needed).

    ut-peft cram --ms 1 2 --output out           # console script (pip install ut-peft)
    python -m ut_peft cram --ms 1 2 --output out  # the same
    python -m ut_peft.cli.cram --ms 1 2           # one command's module
    accelerate launch -m ut_peft.cli.cram ...     # under accelerate (every process runs the module)

``recipes/<name>.py`` in a checkout are thin scripts over these modules. Each command is ``main(args)`` over the
package plus ``parse(argv=None)``; :func:`.common.run` joins them and turns errors into one line.
"""

from __future__ import annotations

import difflib
import importlib
import sys

# command name -> module under ut_peft.cli
COMMANDS = {
    "cram": "cram",
    "reprogram": "reprogram",
    "copy-task": "copy_task",
    "geometry": "geometry",
    "width-study": "width_study",
    "bounds": "bounds",
    "calibrate": "calibrate",
    "status": "status",
    "push": "push",
}

_SUMMARY = {
    "cram": "accessibility sweep: n_50 of m memory vectors on a frozen LM",
    "reprogram": "train only E and U of a fixed backbone on Dyck-1 or k-hop",
    "copy-task": "the copy-length cliff of full vs embedding-only training",
    "geometry": "decoder-cell shares and slope bounds of a causal LM",
    "width-study": "smallest exact widths of the compiled universal transformers",
    "bounds": "slope bounds estimated as the accessibility paper does, beside ut-peft's",
    "calibrate": "a pooled sweep's intervals calibrated by simulating its own design",
    "status": "where a sweep stands (rows, estimate, stop rule, hours spent and left), from its folder alone",
    "push": "upload a saved adapter folder to the Hub with its card (--dry-run shows what would go)",
}


def usage() -> str:
    lines = ["usage: ut-peft COMMAND [flags]   (ut-peft COMMAND --help for its flags; ut-peft --version)", ""]
    lines += ["commands:"]
    lines += [f"  {name:<12} {_SUMMARY[name]}" for name in COMMANDS]
    return "\n".join(lines)


def main(argv=None) -> None:
    """The ``ut-peft`` console script: ``ut-peft COMMAND [flags]``."""
    from .common import run, suggest

    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    if argv[0] in ("-V", "--version"):
        from .. import __version__

        print(f"ut-peft {__version__}")
        return
    name = argv[0].replace("_", "-")
    if name.startswith("-"):  # an option of ut-peft itself: --version and --help are all it takes
        options = ("--version", "--help")
        close = ["--version"] if name == "-v" else difflib.get_close_matches(name, options, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else f"; it takes {', '.join(options)} or a command"
        print(f"{usage()}\n\nut-peft: error: unknown option {argv[0]!r}{hint}", file=sys.stderr)
        sys.exit(2)
    if name not in COMMANDS:
        close = suggest(name, COMMANDS)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        print(f"{usage()}\n\nut-peft: error: unknown command {argv[0]!r}{hint}", file=sys.stderr)
        sys.exit(2)
    module = importlib.import_module(f"{__name__}.{COMMANDS[name]}")
    run(module.main, lambda args: module.parse(args, prog=f"ut-peft {name}"), argv[1:])


__all__ = ["COMMANDS", "main"]
