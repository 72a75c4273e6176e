"""kubeforge.handlers."""
