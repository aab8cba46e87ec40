"""Context: where jobs go and with what (settings, the stack's project, region and bucket,
images), and Google's clients, made only when a task asks for one."""
