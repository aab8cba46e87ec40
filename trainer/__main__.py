import os
import sys
import warnings

# Before TensorFlow loads: keep its start-up chatter out of users' logs (errors still show).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.filterwarnings("ignore", message="Input dict contained keys")  # Model Garden's anchors

from trainer.cli import main  # noqa: E402

sys.exit(main())
