"""A run's best checkpoint, and early stopping: what an evaluator does after each evaluation,
and what the trainer, export and the launcher read.

Every evaluation (eval/ckpt-N.json) holds the experiment's metric (`Experiment.metric`: AP
unless it says otherwise). After each one the evaluator (an eval job beside training, or the
training chief itself between its loops) ranks them all with `stopping.judge` and brings the
run's best/ up to date (`keeping.after_evaluation`): a copy of the best checkpoint's files and
best/best.json naming it. best/ lies apart from the checkpoints Model Garden's manager rotates
(it deletes only what its `checkpoint` file lists), so `trainer.max_to_keep` never removes
the best.

An update never shows a reader a half-made pair: the new checkpoint's files are copied first,
best.json is replaced whole (a rename here; one object upload on Cloud Storage), and only
then are the previous best's files deleted. A crash between two of these leaves the previous
pair intact, and stray files that the next update reuses or deletes. Local evaluators of one
run take turns (a lock); Cloud Storage has no lock, so each writer re-reads best.json just
before replacing it and never replaces a better one: two eval jobs on one run converge.

With early stopping (`--early-stop-patience N`, recorded in run.json so an eval job needs no
flag of its own) the evaluator also writes the verdict, early_stop.json; the trainer reads it
at its loop boundaries and stops.

One module a concern, each importing only those before it: `stopping` (the rule, the judge,
the run's evaluations and the verdict file), `keeping` (best/, best.json and the writer
lock), `choice` (`--checkpoint`: which checkpoint export and evaluation use). No TensorFlow
at import: the launcher parses --checkpoint and reads best.json with these.
"""
