"""coordd: leases with fencing tokens, fenced writes, windows, jobs and
schedules over coordd's HTTP/JSON API. Standard library only.

::

    import coordd

    client = coordd.Client()   # COORD_HTTP_ENDPOINTS / COORD_ENDPOINTS, COORD_TLS_*
    with client.lease("daily-close", ttl=30) as lease:
        lease.fenced_commit("invoices/42", "invoice-42", {"total": 12})
"""

from .client import Client, check_token, default_client, lease, new_request_id
from .errors import (AttemptLost, CoorddError, InvalidArgument, InvalidToken, JobCancelled, JobFinished,
                     JobNotFound, JobRunning, LeaseLost, LeaseNotFound, NotAcquired, NotFound, OutcomeUnknown,
                     PermissionDenied, ResourceExhausted, ResourceLeaseMismatch, ScheduleExists, ScheduleNotFound,
                     ScheduleOverlap, ScheduleRevisionMismatch, StaleToken, TooEarly, Unauthenticated, Unavailable,
                     WindowCompleted, WindowNotClaimed)
from . import delivery
from .jobs import NewJob, Target
from .lease import Claim, Lease
from .types import Commit, Job, JobAttempt, LeaseInfo, Resource, Schedule, SubmittedJob, Window
from .worker import JobContext, Permanent, Worker

__version__ = "0.1.0"

__all__ = [
    "AttemptLost", "Claim", "Client", "Commit", "CoorddError", "InvalidArgument", "InvalidToken", "Job",
    "JobAttempt", "JobCancelled", "JobContext", "JobFinished", "JobNotFound", "JobRunning", "Lease", "LeaseInfo",
    "LeaseLost", "LeaseNotFound", "NewJob", "NotAcquired", "NotFound", "OutcomeUnknown", "Permanent",
    "PermissionDenied", "Resource", "ResourceExhausted", "ResourceLeaseMismatch", "Schedule", "ScheduleExists",
    "ScheduleNotFound", "ScheduleOverlap", "ScheduleRevisionMismatch", "StaleToken", "SubmittedJob", "TooEarly",
    "Target", "Unauthenticated", "Unavailable", "Window", "WindowCompleted", "WindowNotClaimed", "Worker", "check_token",
    "default_client", "delivery", "lease", "new_request_id",
]
