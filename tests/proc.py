"""Reading a process's state from /proc, for tests that watch processes come and go."""


def read_stat(pid):
    """(state, ppid, pgid) of process `pid`, or None when it is gone.

    The command name in parentheses may hold spaces and parentheses itself,
    so the fields are read after its last ")".
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = data.rsplit(b")", 1)[1].split()
    return fields[0].decode(), int(fields[1]), int(fields[2])


def alive(pid):
    """Whether `pid` exists and is not a zombie."""
    stat = read_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def stopped(pid):
    """Whether `pid` is stopped by a signal (SIGSTOP) or a tracer."""
    stat = read_stat(pid)
    return stat is not None and stat[0] in ("T", "t")
