"""``python -m autotune`` and the ``autotune`` console script.

A Ctrl-C while the command line is still importing (a second or more on a busy machine) ends
with exit 130 and no traceback, as one during the run does.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from autotune.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    cli_main()


if __name__ == "__main__":
    main()
