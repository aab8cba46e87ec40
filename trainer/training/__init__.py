"""Training: the command's settings (`settings.py`, from `trainer.args.TrainArgs`), the Model
Garden config built from them (`params.py`), the checks on --init-from (`init_checkpoint.py`,
`pretrained.py`), where it runs (`distribution.py`), what its log says of the loss
(`progress.py`) and the driver (`train.py`), which evaluates and exports with the rooms below."""
