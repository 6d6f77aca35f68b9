"""`python -m oomguard ARGS...`: the installed binary, run with the same arguments.

The process is replaced (execv), not wrapped: signals, the terminal, the exit status and the
process tree are the binary's own, as if `oomguard` had been typed, which a supervisor needs
(a Python parent left in between would receive Ctrl-C and hold the job's terminal).
"""

import os
import sys

from oomguard import find_oomguard_bin


def main() -> None:
    try:
        binary = find_oomguard_bin()
    except FileNotFoundError as e:
        print(f"oomguard: error: {e}", file=sys.stderr)
        sys.exit(127)
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
