"""kubeforge.placement."""
