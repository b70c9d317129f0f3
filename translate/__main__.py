"""`python -m translate` and the `translate` command: `translate train` first moves under a
faster allocator where the system has one (translate.allocator), then the command runs.

Tests: tests/test_cli.py, tests/test_allocator.py.
"""

import sys

from translate.allocator import rerun_under_allocator


def run() -> None:
    """The `translate` command's entry point."""
    try:
        rerun_under_allocator(sys.argv)
    except ValueError as error:  # TRANSLATE_ALLOCATOR unusable: one line, as the commands fail
        sys.exit(f"Error: {error}")
    from translate.cli import main

    main()


if __name__ == "__main__":
    run()
