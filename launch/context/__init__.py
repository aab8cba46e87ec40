"""Context: where jobs go and with what (settings, the stack's places, images), and Google's
clients, made only when a task asks for one."""
