"""The errors a user can fix, in one module that imports nothing: `python -m trainer` catches
them to print one line (exit 2 for bad input, 1 for failed work) without loading TensorFlow,
and the modules that raise them need not import each other to share them."""

from __future__ import annotations


class SettingsError(ValueError):
    """A flag or environment value that cannot work; the message says which and how to fix it."""


class JsonError(ValueError):
    """A JSON document we did not write that is not JSON, or too deep or too large to read
    (`trainer.common.jsonnum`); the message names the file."""


class LabelMapError(ValueError):
    """A label map that is missing, unreadable or not of the pbtxt form."""


class ClusterSpecError(ValueError):
    """A TF_CONFIG or CLUSTER_SPEC that does not describe a cluster this trainer can join."""


class ConversionError(ValueError):
    """Input a conversion cannot read: a directory not of its format's layout, an annotation
    file that is not of its format; nothing is written."""


class ConversionFailed(RuntimeError):
    """A conversion that ran and could not finish (a worker died) or found no valid example;
    the previous output is left as it was."""


class DownloadError(RuntimeError):
    """A download that failed or did not match its checksum."""


class PredictError(ValueError):
    """A model or image set that prediction cannot use (not a detector, no image matches)."""


class DirectoryBusy(RuntimeError):
    """Another process writes to this directory (it holds the directory's lock)."""


class EvalTimeoutError(RuntimeError):
    """No new checkpoint appeared within the evaluator's idle timeout."""


# The one rule, for the trainer as for every task (docs/design/exit-codes.md): a mistake of
# the user's (a flag, a setting, an input that is missing, of the wrong kind, or matches
# nothing) exits 2 with one line; work that ran and failed exits 1.
USAGE_ERRORS = (SettingsError, LabelMapError, JsonError, ClusterSpecError, DirectoryBusy,
                ConversionError, PredictError, FileNotFoundError)
FAILURES = (ConversionFailed, DownloadError)
