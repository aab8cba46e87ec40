"""The command line, on top of every room: `main.py` runs the command `argv` names (each
command's runner, the exit statuses, the one error line launchers read), `bucket_convert.py`
the conversion job next to the data, `quiet.py` the log filter `python -m trainer` starts
with. The commands' flags are declared below, in `trainer/args.py`."""
