"""kubeforge: a Kubernetes operator for GPU workloads.

Three custom resources in group ``kubeforge.io``, version ``v1alpha1``: ``GPUPool``,
``TrainingJob`` and ``InferenceService``. The pure core (``placement``, ``autoscaling``,
``builders``) has no I/O; ``handlers`` wire it to the API server through kopf.
"""

__version__ = "0.2.0.dev0"

GROUP = "kubeforge.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
