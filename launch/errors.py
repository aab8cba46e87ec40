"""The errors a user can act on, as one family. `invoke` prints them as one line that names
the fix; anything else is a bug and keeps its traceback.

- `UserError` (exit 2): a flag, a setting, an input or an access right to fix.
  - `InputError`: a value that cannot work (a run id, a machine, a path, a shard set).
  - `MissingError`: something that should exist does not (a bucket, a checkpoint, data).
- `StepFailed` (exit 1): the request was fine but the work failed (a job, a build); its
  output or logs say why.
"""

from __future__ import annotations

from launch.text import printable


class UserError(Exception):
    """Something the user can fix; the message says what and how."""


class InputError(UserError):
    """A flag or input value that cannot work."""


class MissingError(UserError):
    """Something the command needs is not there (yet)."""


class StepFailed(Exception):
    """A job, build or other step ran and failed; the message says where its output is."""


NO_CREDENTIALS = "no Google credentials"  # a note's reason; a dry run says the fix once


def reason(error: BaseException, limit: int = 200) -> str:
    """An exception as the short reason a note gives: its first line, or its type, made
    printable (a service's or a file's words, shown and never obeyed by the terminal); the
    same few words for missing credentials, whatever google.auth's text. Outside words are
    cut at `limit` (and say so); a UserError's are the project's own, each quoting outside
    text within bounds: whole, never cut mid-sentence."""
    from google.auth.exceptions import DefaultCredentialsError

    if isinstance(error, DefaultCredentialsError):
        return NO_CREDENTIALS
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if not isinstance(error, UserError) and len(first) > limit:
        first = first[:limit] + "..."
    return printable(first)
