"""`python -m jobs.scheduler`: kept for one release; the scheduler is jobs/runtime/scheduler.py."""

import runpy

if __name__ == "__main__":
    runpy.run_module("jobs.runtime.scheduler", run_name="__main__", alter_sys=True)
