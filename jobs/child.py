"""`python -m jobs.child`: kept for one release; the child's entry is jobs/runtime/process/main.py."""

import runpy

if __name__ == "__main__":
    runpy.run_module("jobs.runtime.process.main", run_name="__main__", alter_sys=True)
