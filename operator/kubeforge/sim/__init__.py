"""kubeforge.sim."""
