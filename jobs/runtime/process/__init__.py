"""The `process` execution mode: a job run in a supervised child process.

    mode.py    the worker's side: spawn the child for a claimed job, watch it, record its end
    parent.py  spawning, watching and stopping a supervised child
    main.py    the child's entry point, `python -m jobs.runtime.process.main <id> <token>`
    child.py   what runs inside a child: signs of life, the parent-death watch, limits

Here "child" always means a process; a job that waits for others is a dependent.
`child.py` imports nothing of the engine (it runs before Django is set up);
the rest may import what the runtime may.
"""
