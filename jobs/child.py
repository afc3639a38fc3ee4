"""The child process of a `process`-mode job: `python -m jobs.child <job id> <lease token>`.

It runs the handler and records the outcome itself, guarded by the token it
was given, so it can only write while it still holds the job's lease. If its
parent worker dies, jobs/childside.py stops this whole process group.
"""

import sys


def main():
    import django

    from jobs import childside

    # Starting Django can take seconds on a busy machine; that is not a stall.
    with childside.keepalive(every_s=0.5):
        django.setup()
        from jobs import execution
        from jobs.context import JobContext
        from jobs.models import Job, JobStatus

        job_id, token = int(sys.argv[1]), sys.argv[2]
        job = Job.objects.filter(pk=job_id, status=JobStatus.RUNNING, lease_token=token).first()
    if job is None:
        return  # the lease moved on before we started: nothing is ours to do
    ctx = JobContext(job, worker_id=job.worker_ids[-1] if job.worker_ids else "")
    outcome, value = execution.run_handler(job, ctx)
    execution.settle(job, ctx, outcome, value)


if __name__ == "__main__":
    from jobs import childside

    childside.run(main)
