"""`python -m clustercheck` and the console script: a Ctrl-C while the modules load is an interruption."""

import sys

from clustercheck.core.errors import EXIT_INTERRUPTED, caused_by_interrupt


def run() -> None:
    """The `clustercheck` command: a Ctrl-C while the modules load is an interruption, not a traceback."""
    try:
        from clustercheck.cli import main   # inside the try: a Ctrl-C while the modules load exits 130, not a traceback
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:   # noqa: BLE001 - only an interruption in disguise is ours to catch here
        if caused_by_interrupt(exc):
            sys.exit(EXIT_INTERRUPTED)
        raise
    main()


if __name__ == "__main__":
    run()
