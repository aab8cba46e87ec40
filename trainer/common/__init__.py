"""The shared base, importing nothing of the trainer's rooms: the user's errors (`errors.py`),
the names of the files the trainer writes and the launcher reads (`files.py`), local and gs://
file access (`io.py`), JSON and YAML read from hostile files (`jsonnum.py`, `yamlfile.py`),
options declared once (`options.py`), the registry every name-picked thing uses
(`registry.py`), and one writer per directory (`locks.py`)."""
