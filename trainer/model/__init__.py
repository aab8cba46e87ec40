"""What a run is made of and keeps: the experiments (`experiments/`), a model directory's
files (`model_dir.py`), a checkpoint's evaluation record (`eval_record.py`), the best
checkpoint and early stopping (`best/`), a tuning trial's values (`hparams.py`), and Model
Garden's code traced as written (`tracing.py`). TensorFlow-free at import: the launcher reads
runs with these."""
