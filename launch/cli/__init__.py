"""The command line: what tasks.py builds its flags and tasks from; nothing below imports it."""
