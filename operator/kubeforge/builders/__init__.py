"""kubeforge.builders."""
