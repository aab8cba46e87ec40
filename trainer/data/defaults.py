"""The data tools' defaults and caps, in a module without imports, so the command line
(`trainer/args.py`) and the launchers name them without loading PIL, numpy or TensorFlow."""

NUM_SAMPLE_IMAGES = 360  # `data sample`: enough for the demo to reach its AP50 bar
NUM_SHARDS = 10  # `data convert`: shards per split
MAX_PIXELS = 40_000_000  # a 40 MP photo decodes to 120 MB of RGB
MAX_OBJECTS = 1000  # objects in one annotation
