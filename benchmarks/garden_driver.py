"""Model Garden's own training driver (official/vision/train.py), unchanged, with the Pets
experiments registered so that it knows their names: the reference `bench.train` times our
trainer against."""

from __future__ import annotations

from absl import app
from official.common import flags as tfm_flags
from official.vision import train

from trainer.model.experiments import register

if __name__ == "__main__":  # as official/vision/train.py's own
    tfm_flags.define_flags()
    register()
    app.run(train.main)
