"""``make bench-model-cache`` (issue 29, item 5): cache-aware placement of model-server replicas
over a day of scale-ups and scale-downs on a 64-node fleet, through kubeforge's pure placement
core (no cluster). kubeforge with and without its cache preference, KServe's LocalModelCache
(one fixed node group, cache-blind placement) and the all-cached bound, on the same day.
See e2e/README-model-cache-bench.md."""
