"""Signals the engine sends; receivers must be quick and must not raise."""

from django.dispatch import Signal

# A job reached SUCCESSFUL, FAILED or CANCELLED. Sent after the transaction
# that recorded it committed, with the job as the writer knew it (`job`,
# status and result updated in memory; no query is spent to send it).
job_finished = Signal()
