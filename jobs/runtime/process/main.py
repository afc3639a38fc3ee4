"""The child process of a `process`-mode job: `python -m jobs.runtime.process.main <job id> <lease token>`.

It runs the handler and records the outcome itself, guarded by the token it
was given, so it can only write while it still holds the job's lease. If its
parent worker dies, jobs/runtime/process/child.py stops this whole process group.
"""

import signal
import sys


def main():
    import django

    from jobs.runtime.process import child as childside

    # Starting Django can take seconds on a busy machine; that is not a stall.
    with childside.keepalive(every_s=0.5):
        django.setup()
        from jobs.models import Job, JobStatus
        from jobs.runtime import execution
        from jobs.runtime.context import JobContext

        job_id, token = int(sys.argv[1]), sys.argv[2]
        job = Job.objects.filter(pk=job_id, status=JobStatus.RUNNING, lease_token=token).first()
    if job is None:
        return  # the lease moved on before we started: nothing is ours to do
    ctx = JobContext(job, worker_id=job.worker_ids[-1] if job.worker_ids else "")
    outcome, value = execution.run_handler(job, ctx)
    if outcome == "error" and not isinstance(value, Exception) and _job_handles_sigterm():
        # The job's own SIGTERM handler may have turned its supervisor's stop
        # (a cancel, a shutdown, a stall) into this SystemExit: recording it as
        # a failure would beat the supervisor to the job. Exit with it instead;
        # the supervisor records why it stopped the job, or that the child
        # exited without a result.
        raise value
    execution.settle(job, ctx, outcome, value)


def _job_handles_sigterm():
    """Whether the job installed a Python handler for SIGTERM (by default it kills, raising nothing)."""
    return callable(signal.getsignal(signal.SIGTERM))


if __name__ == "__main__":
    from jobs.runtime.process import child as childside

    childside.run(main)
