import os
import sys
import warnings

# Before TensorFlow loads: keep its start-up chatter out of users' logs (errors still show).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Model Garden builds its models with tf_keras: `tf.keras` is then the same package, and
# TensorFlow does not import Keras 3 beside it (2 s of every start, measured 2026-11-27).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
warnings.filterwarnings("ignore", message="Input dict contained keys")  # Model Garden's anchors

from trainer.cli import quiet  # noqa: E402

quiet.filter_stderr()  # the lines TensorFlow prints on every run, gone from the log
from trainer.cli.main import main  # noqa: E402

sys.exit(main())
