"""Data tools: the Oxford-IIIT Pets layout, synthetic samples, download and TFRecord conversion."""
