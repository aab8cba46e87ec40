"""Stores: what runs read and keep besides the job (datasets and their checks, each run's job
file and config copies, prices), in Cloud Storage or on this machine."""
