"""The `vdrnn` command (also `python -m vdrnn`): :func:`vdrnn.cli.main`, imported here so that a Ctrl-C that comes
before the run's own handlers (while Python imports Hydra, or Hydra composes the config) ends the command in a line
rather than a traceback."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from vdrnn.cli import main as run_command

        run_command()
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C); no run had started, so there is nothing to continue", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
