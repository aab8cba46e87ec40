"""Job values: what a job is (its file, request, resources, sweep), TensorFlow-free, no clients."""
