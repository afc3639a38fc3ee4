"""Start throw-away PostgreSQL and Redis servers, run a command, stop them.

    python -m tests.services -- scripts/run-tests

Each server listens on a free loopback port in a temporary folder and is gone
when the command ends. The command sees:

    TEST_POSTGRES_URL, TEST_PG_BIN, TEST_PG_DATA, TEST_PG_PORT, TEST_PG_USER
    TEST_PGBOUNCER_URL, TEST_PGBOUNCER_PORT (PgBouncer, transaction pooling, in front of it)
    TEST_REDIS_URL, TEST_REDIS_BIN

A server whose binaries are missing is reported loudly and left out; with
REQUIRE_SERVICES=1 that is an error instead, so CI cannot pass by skipping.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PG_BIN_CANDIDATES = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_pg_bin():
    candidates = [os.environ.get("PGBIN", "")] + PG_BIN_CANDIDATES
    which = shutil.which("initdb")
    if which:
        candidates.append(str(Path(which).parent))
    for folder in candidates:
        if folder and Path(folder, "initdb").exists() and Path(folder, "pg_ctl").exists():
            return folder
    return None


def as_postgres_user():
    # PostgreSQL refuses to run as root; CI runs as root.
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def start_postgres(root):
    pg_bin = find_pg_bin()
    if pg_bin is None:
        return None, {}
    port = free_port()
    folder = root / "pg"
    folder.mkdir()
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    prefix = as_postgres_user()
    subprocess.run(
        prefix + [f"{pg_bin}/initdb", "-D", str(data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--locale=C.UTF-8", "-N"],
        check=True, stdout=subprocess.DEVNULL,
    )
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off -c max_connections=500"
    )
    subprocess.run(
        prefix + [f"{pg_bin}/pg_ctl", "-D", str(data), "-l", str(folder / "log"), "-w", "-t", "30",
                  "-o", options, "start"],
        check=True, stdout=subprocess.DEVNULL,
    )
    env = {
        "TEST_POSTGRES_URL": f"postgres://postgres@127.0.0.1:{port}/postgres",
        "TEST_PG_BIN": pg_bin,
        "TEST_PG_DATA": str(data),
        "TEST_PG_PORT": str(port),
        "TEST_PG_OPTIONS": options,
        "TEST_PG_LOG": str(folder / "log"),
        "TEST_PG_USER": "postgres" if os.geteuid() == 0 else "",
    }

    def stop():
        subprocess.run(prefix + [f"{pg_bin}/pg_ctl", "-D", str(data), "-m", "immediate", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    return stop, env


PGBOUNCER_CANDIDATES = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]

PGBOUNCER_INI = """\
[databases]
; Any database name goes to the server under the same name (tests make their own).
* = host=127.0.0.1 port={pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = {pool_size}
max_db_connections = {max_db_connections}
max_client_conn = 2000
; The engine's idle-in-transaction guard behind a transaction pooler: half the
; default lease (JOBS_LEASE_SECONDS = 30), as the direct connection sets it.
idle_transaction_timeout = {idle_transaction_timeout_s}
logfile = {folder}/log
pidfile = {folder}/pid
"""


def find_pgbouncer():
    for path in [shutil.which("pgbouncer") or "", *PGBOUNCER_CANDIDATES]:
        if path and Path(path).exists():
            return path
    return None


def start_pgbouncer(root, pg_port, *, pool_size=20, max_db_connections=0,
                    idle_transaction_timeout_s=15):
    """PgBouncer in transaction pooling mode on a free loopback port, in front of `pg_port`.

    `pool_size` server connections per database and user, `max_db_connections`
    per database in all (0: no cap). Returns (stop, env) like the others.
    """
    binary = find_pgbouncer()
    if binary is None:
        return None, {}
    port = free_port()
    folder = root / "pgbouncer"
    folder.mkdir()
    (folder / "userlist.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(PGBOUNCER_INI.format(
        pg_port=pg_port, port=port, folder=folder, pool_size=pool_size,
        max_db_connections=max_db_connections,
        idle_transaction_timeout_s=idle_transaction_timeout_s))
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root: it runs as the postgres user and writes its log here.
        shutil.chown(folder, "postgres", "postgres")
    proc = subprocess.Popen(as_postgres_user() + [binary, "--quiet", str(folder / "pgbouncer.ini")],
                            stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, "pgbouncer")
    except RuntimeError:
        proc.kill()
        raise

    def stop():
        # Signalled itself, not through runuser (which would complain on stderr).
        try:
            os.kill(int((folder / "pid").read_text()), signal.SIGTERM)
            proc.wait(10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            proc.kill()

    return stop, {"TEST_PGBOUNCER_URL": f"postgres://postgres@127.0.0.1:{port}/pooled",
                  "TEST_PGBOUNCER_PORT": str(port)}


def wait_for_port(port, proc, name, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with code {proc.returncode} at start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not start within {timeout_s} s")


def start_redis(root):
    binary = shutil.which("redis-server")
    if binary is None:
        return None, {}
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         # Three test passes of eight databases each (tests/isolation.py).
         "--databases", "24", "--dir", str(root)],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc, "redis-server")
    except RuntimeError:
        proc.kill()
        raise

    def stop():
        proc.terminate()
        proc.wait(10)

    return stop, {"TEST_REDIS_URL": f"redis://127.0.0.1:{port}/0", "TEST_REDIS_BIN": binary}


def main(argv):
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.exit("usage: python -m tests.services -- COMMAND [ARGS...]")
    command = argv[argv.index("--") + 1:]
    required = os.environ.get("REQUIRE_SERVICES") == "1"
    root = Path(tempfile.mkdtemp(prefix="haulage-services-"))
    os.chmod(root, 0o755)
    stops, env = [], dict(os.environ)
    try:
        for name, start in [("PostgreSQL", start_postgres), ("PgBouncer", start_pgbouncer),
                            ("Redis", start_redis)]:
            if start is start_pgbouncer:
                if "TEST_PG_PORT" not in env:
                    continue  # no PostgreSQL to pool: said above
                stop, extra = start_pgbouncer(root, env["TEST_PG_PORT"])
            else:
                stop, extra = start(root)
            if stop is None:
                message = f"{name} is not installed: its tests will be skipped."
                if required:
                    sys.exit(f"REQUIRE_SERVICES=1 but {message.split(':')[0]}.")
                print(f"\n*** WARNING: {message} ***\n", file=sys.stderr)
                continue
            stops.append(stop)
            env.update(extra)
        # Let Ctrl+C reach the command and still stop the servers afterwards.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return subprocess.call(command, env=env)
    finally:
        for stop in reversed(stops):
            stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
