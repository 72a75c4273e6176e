"""kubeforge.runtime: the thin layer between the pure core and the API server.

read (kopf indexes, the pod/node :mod:`~kubeforge.runtime.informer`, :mod:`~kubeforge.runtime.cache`) -> plan (:mod:`kubeforge.admission`,
:mod:`kubeforge.lifecycle`, :mod:`kubeforge.autoscaling`) -> apply
(:mod:`~kubeforge.runtime.client`), with one status writer per object, Events off the hot
path and leader election (:mod:`~kubeforge.runtime.leader`). Import
:mod:`kubeforge.runtime.operator` to register the kopf handlers.
"""
