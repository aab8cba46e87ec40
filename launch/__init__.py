"""Client-side launch logic: jobs described as data, and executors that run them."""
