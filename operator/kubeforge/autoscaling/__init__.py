"""kubeforge.autoscaling."""
