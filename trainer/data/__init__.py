"""Data tools: the Oxford-IIIT Pets layout, synthetic samples, download, TFRecord conversion,
the bucket's raw objects read safely (`objects.py`) and named datasets (`datasets.py`)."""
